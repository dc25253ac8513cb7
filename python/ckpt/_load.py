"""ckpt.load: a checkpoint as Python objects, nothing executed.

Default: every tensor lives in private memory that does not depend on the
file. libckpt opens the file (its structure only) and hands over its whole
tree in one call (ckpt_file_value_table); the converter builds each tensor
as a view of one torch buffer per storage (so tensors that shared a storage
in the file share memory after loading; a tensor that is its whole storage
is allocated as itself), and one ckpt_file_read_storages call fills all the
buffers in file order with large sequential preads. The calls into libckpt
per load do not grow with the number of tensors. The file can then be truncated, rewritten or
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
import gc
import json
import sys
import mmap
import os
import stat

from . import errors
from ._lib import (KIND_BOOL, KIND_BYTES, KIND_DICT, KIND_FLOAT, KIND_INT,
                   KIND_LIST, KIND_NONE, KIND_OBJECT, KIND_SET, KIND_STR,
                   KIND_TENSOR, KIND_TUPLE, NO_OFFSET, c_u64, check, fspath, last_error,
                   lib, text)
from ._lib import (FORMAT_SAFETENSORS_SHARDED, FORMAT_TORCH_SHARDED,
                   NODE_WORDS, TABLE_CONTIGUOUS, TABLE_NUMPY, TABLE_PARAMETER, TABLE_RAW,
                   TABLE_REQUIRES_GRAD, TABLE_WHOLE, TENSOR_WORDS, VALUE_TABLE_VERSION,
                   ValueTable_)
from ._lib import (T_DATA, T_DEVICE, T_DEVICE_LEN, T_DIMS, T_DTYPE, T_FILE_OFFSET, T_FLAGS,
                   T_MEMBER, T_MEMBER_LEN, T_NBYTES, T_NDIM, T_NUMEL, T_PTR, T_STORAGE_ID,
                   T_STORAGE_NBYTES, T_STORAGE_OFFSET)
from . import _scan


# ckpt dtype names -> torch attribute names (absent ones fall back to RawTensor).
_TORCH_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16",
    "U16": "uint16", "I32": "int32", "U32": "uint32", "I64": "int64",
    "U64": "uint64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
    "F64": "float64", "C32": "complex32", "C64": "complex64",
    "C128": "complex128", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz", "F4_X2": "float4_e2m1fn_x2", "BITS8": "bits8",
    "BITS16": "bits16", "BITS1X8": "bits1x8", "BITS2X4": "bits2x4", "BITS4X2": "bits4x2",
}


# ckpt dtype names -> numpy dtype codes (little-endian, as ckpt reads them)
_NUMPY_DTYPES = {
    "BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "I32": "<i4",
    "U32": "<u4", "I64": "<i8", "U64": "<u8", "F16": "<f2", "F32": "<f4", "F64": "<f8",
    "C64": "<c8", "C128": "<c16",
}


_numpy_dtype_cache = {}


def _numpy_dtype(code):
    out = _numpy_dtype_cache.get(code)
    if out is None:  # looked up once per dtype: not a library call per value
        import numpy as np
        out = _numpy_dtype_cache[code] = np.dtype(_NUMPY_DTYPES[_dtype_info(code)[0]])
    return out


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
    F6, F4 without float4_e2m1fn_x2, quantized, unsigned 16/32/64 on
    torch < 2.3): `dtype` is the ckpt name ("F8_E4M3"), `shape` a tuple, `data` a uint8 tensor of its logical
    contents as contiguous little-endian bytes."""

    __slots__ = ("dtype", "shape", "data")

    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, tuple(shape), data

    def __repr__(self):
        return "<ckpt.RawTensor %s%s>" % (self.dtype, list(self.shape))


_dtype_cache = {}
# a DICT node's class word (ckpt_value_dict_class) -> the mapping class
# torch.load would build
_DICT_CLASSES = (dict, collections.OrderedDict, collections.Counter)


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


def _torch_constant(torch, name):
    """The torch global `name` when it is data torch.load gives as itself
    (a dtype or a qscheme: torch.float32, torch.per_tensor_affine), else
    None."""
    if name.startswith("torch."):
        v = getattr(torch, name[6:], None)
        if isinstance(v, (torch.dtype, torch.qscheme)):
            return v
    return None


def _pure_call(torch, o):
    """What torch.load builds for the calls of plain data its weights_only
    unpickler allows and libckpt leaves opaque: builtins.complex(real[,
    imag]) and torch.serialization._get_layout("torch.strided") (a layout
    value); any other placeholder is o itself."""
    a = o.args
    if o.state is not None or type(a) is not tuple:
        return o
    if o.name == "builtins.complex" and 1 <= len(a) <= 2 and \
            all(type(x) in (int, float) for x in a):
        return complex(*a)
    if o.name == "torch.serialization._get_layout" and len(a) == 1 and type(a[0]) is str \
            and a[0].startswith("torch."):
        layout = getattr(torch, a[0][6:], None)
        if isinstance(layout, torch.layout):
            return layout
    return o


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
        self.format = None
        # default: libckpt opens the path and reads tensor bytes with pread
        data = _read(self.path) if mmap else None
        # the open and the scan touch the mapping at a few places (header,
        # the file's tail): without read-ahead there, so a cold file is
        # not read in windows around them; the tensors' pages read ahead
        # as usual once they are touched (restored below)
        _advise(data, "MADV_RANDOM")
        if data is not None:
            self.buf = data
            self.export = (ctypes.c_char * len(data)).from_buffer(data)
            self.addr = ctypes.addressof(self.export)
        try:
            # libckpt's readers run nothing, so the open may come first: a
            # safetensors header is then parsed once, for both
            if data is not None:
                rc = lib.ckpt_open_memory(ctypes.byref(self.handle), self.addr,
                                          len(data), fspath(self.path), None)
                if rc == errors.UnsupportedError.code:
                    rc = self._open_path()  # a sharded index (or a real refusal again)
            else:
                rc = self._open_path()
            failed = last_error(rc, self.path) if rc < 0 else None  # before the scan's calls
            if scan:  # its verdict before the reader's error
                # the open's structure serves the scan: a safetensors
                # header, a torch zip's directory are read once
                if rc == 0:
                    self.report = _scan.scan_file(self.handle, self.path, allow)
                else:
                    self.report = (_scan.scan_memory(self.addr, len(data), self.path, allow)
                                   if self.buf is not None else _scan.scan(self.path, allow))
                if not unsafe_ok and self.report.verdict in ("unsafe", "review"):
                    raise _scan.unsafe_error(self.report, self.path)
            if failed is not None:
                raise failed
            # torch.load(mmap=True) would map a compressed record's bytes
            # as the tensor: refuse rather than give the inflated values
            if mmap:
                rc = lib.ckpt_file_check_mmap(self.handle)
                if rc < 0:
                    raise last_error(rc, self.path)
            self.format = lib.ckpt_file_format(self.handle)
            _advise(data, "MADV_NORMAL")
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

    def locate(self, contiguous, off, member):
        """(buffer, byte offset of element [0,..,0]) of a contiguous tensor
        of a sharded set at `off` in shard `member` (libckpt maps the shards
        itself, read-only: they are mapped again here, copy-on-write), else
        None. A .bin set's member is its shard too, and its records were
        found stored (ckpt_file_check_mmap): the bytes are the elements."""
        if (self.format not in (FORMAT_SAFETENSORS_SHARDED, FORMAT_TORCH_SHARDED)
                or not contiguous or off < 0 or not member):
            return None
        if member not in self.shards:
            # libckpt refused names with "..", roots or drives at open
            self.shards[member] = _read(os.path.join(os.path.dirname(self.path), member))
        buf = self.shards[member]
        return (buf, off) if buf is not None else None


def _weights_path(path):
    """A model directory stands for the weights file libckpt opens in it
    (ckpt_open's rule, in transformers' order: model.safetensors, its index,
    pytorch_model.bin, its index; a store's latest generation's), found
    without opening it (ckpt_open_target): the scan then comes first as for
    that file, so an unsafe shard is ckpt.UnsafeError through either path.
    A DCP directory: the file ckpt_open names (its .metadata)."""
    if not os.path.isdir(path):
        return path
    out = ctypes.c_void_p()
    check(lib.ckpt_open_target(ctypes.byref(out), fspath(path)), path)
    try:
        target = text(ctypes.string_at(out.value))
    finally:
        lib.ckpt_string_free(out)
    if not os.path.isdir(target):
        return target
    h = ctypes.c_void_p()
    check(lib.ckpt_open(ctypes.byref(h), fspath(path), None), path)
    try:
        return text(lib.ckpt_file_path(h))
    finally:
        lib.ckpt_close(h)


def _advise(data, advice):
    """madvise(advice) on _read's mapping (not on a bytearray, nor where
    the platform lacks it)."""
    if isinstance(data, mmap.mmap) and hasattr(mmap, advice):
        data.madvise(getattr(mmap, advice))


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
            # the mapping's faults read ahead with this open file's
            # window: doubled, as safetensors' load_file asks for its own
            # mapping (a cold file is then read in larger pieces)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            return mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
        try:
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = bytearray(fh.read())
        except OSError:  # a directory...: ckpt_open words the error
            return None
        return data or None
    finally:
        os.close(fd)


class _Table:
    """ckpt_file_value_table of an opened file (one call): the logical
    tree's nodes (children before parents, the root last) and tensor
    records as one list of ints, its strings as one bytes object."""

    def __init__(self, src):
        p = ctypes.POINTER(ValueTable_)()
        check(lib.ckpt_file_value_table(ctypes.byref(p), src.handle), src.path)
        try:
            t = p.contents
            if t.version != VALUE_TABLE_VERSION:
                raise errors.UnsupportedError("value table version %d (expected %d)"
                                              % (t.version, VALUE_TABLE_VERSION), src.path)
            raw = ctypes.string_at(t.words, t.nwords * 8) if t.nwords else b""
            self.text = ctypes.string_at(t.text, t.ntext) if t.ntext else b""
            self.nnodes, self.tensors_at = t.nnodes, t.tensors_at
            self.refs_at, self.dims_at = t.refs_at, t.dims_at
        finally:
            lib.ckpt_value_table_free(p)
        # read in place: a list of the words would hold a Python int per
        # word (about 100 MB at 100k tensors)
        self.words = memoryview(raw).cast("q")
        self.floats = memoryview(raw).cast("d")  # FLOAT nodes: the same words

    def record(self, j):
        """Tensor record j: its TENSOR_WORDS words, shape, stride (lists)."""
        w = self.words
        o = self.tensors_at + j * TENSOR_WORDS
        r = w[o:o + TENSOR_WORDS].tolist()
        d, n = self.dims_at + r[T_DIMS], r[T_NDIM]
        return r, w[d:d + n].tolist(), w[d + n:d + 2 * n].tolist()

    def str(self, off, n):
        return self.text[off:off + n].decode("utf-8", "surrogateescape")


def _record_of(t, strings):
    """The table's record of ckpt_tensor t, from the per-tensor accessors
    (ckpt.open's single tensors); its strings appended to `strings`."""
    def put(s):
        off = len(strings)
        strings.extend(s)
        return off, len(s)
    ndim = lib.ckpt_tensor_ndim(t)
    shp, st = lib.ckpt_tensor_shape(t), lib.ckpt_tensor_stride(t)
    dev, member = lib.ckpt_tensor_device(t) or b"", lib.ckpt_tensor_member(t) or b""
    off = lib.ckpt_tensor_file_offset(t)
    flags = TABLE_CONTIGUOUS if lib.ckpt_tensor_is_contiguous(t) else 0
    p, n = ctypes.c_void_p(), ctypes.c_size_t()
    data = (p.value or 0) if flags and lib.ckpt_tensor_data(t, ctypes.byref(p),
                                                            ctypes.byref(n)) == 0 else 0
    r = [lib.ckpt_tensor_dtype(t), ndim, 0, lib.ckpt_tensor_storage_id(t),
         lib.ckpt_tensor_storage_offset(t), lib.ckpt_tensor_numel(t),
         lib.ckpt_tensor_nbytes(t), lib.ckpt_tensor_storage_nbytes(t), flags, data,
         *put(dev), -1 if off == NO_OFFSET else off, *put(member), t]
    return r, [shp[i] for i in range(ndim)], [st[i] for i in range(ndim)]


class _Converter:
    """Builds Python objects from the file's value table (one C call),
    memoised by node so shared sub-objects stay shared and a list that
    contains itself is rebuilt as one, like pickle does. Tensor bytes are
    read afterwards by read(), in one call per kind of read."""

    _PENDING = object()

    def __init__(self, src, map_location=None, load_types=True, plan=True):
        import torch
        self.torch = torch
        self.src = src
        # torch.load's types: numpy arrays stay numpy, parameters are
        # nn.Parameter, requires_grad is kept; else plain tensors (ckpt.open:
        # safetensors' get_tensor with framework="pt")
        self.load_types = load_types
        # plan: read() fills private buffers after the conversion (ckpt.load); else
        # each tensor is a view of the mapping or a copy (ckpt.open)
        self.plan = plan
        self.map_location = map_location
        self.table = None
        self.text = bytearray()  # strings of _record_of's records
        self.moves = {}  # id(tensor) -> (tensor, target device)
        self.bases = {}
        # default mode: storage id -> the tensor whose memory is its
        # private buffer, filled by read(); copies: (ckpt_tensor,
        # destination address, its owner) read by read(); bool views
        # normalised after it
        self.buffers = {}
        self.copies = []
        self.bools = []
        # placeholders mode (StateDictReader): id(meta tensor) -> (meta, t)
        self.placeholders = None

    def convert(self):
        """The logical tree as Python objects."""
        # every object built here stays alive: the collections their
        # allocation would trigger (a fifth of the time at 100k tensors)
        # could free nothing
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._convert()
        finally:
            if enabled:
                gc.enable()

    def _convert(self):
        """Two passes over the table's nodes (children come first): leaves
        and empty containers, then the containers filled (tuples and sets
        built) from their children."""
        tab = self.table = _Table(self.src)
        w, text, n = tab.words, tab.text, tab.nnodes
        objs = [None] * n
        pending = self._PENDING
        for i in range(n):
            o = i * NODE_WORDS
            k = w[o]
            if k == KIND_TENSOR:
                objs[i] = self.tensor(w[o + 1])
            elif k == KIND_STR:
                raw = text[w[o + 1]:w[o + 1] + w[o + 2]]
                try:
                    objs[i] = raw.decode("utf-8", "surrogatepass")  # as pickle decodes
                except UnicodeDecodeError:
                    objs[i] = raw.decode("utf-8", "surrogateescape")
                if w[o + 3]:  # built as a torch.device: torch.load gives one
                    objs[i] = self._device(objs[i])
            elif k == KIND_DICT:
                objs[i] = _DICT_CLASSES[w[o + 3]]()
            elif k == KIND_LIST:
                objs[i] = []
            elif k == KIND_TUPLE or k == KIND_SET:
                objs[i] = pending
            elif k == KIND_INT:
                objs[i] = w[o + 1] if w[o + 2] < 0 else int(tab.str(w[o + 2], w[o + 3]))
            elif k == KIND_FLOAT:
                objs[i] = tab.floats[o + 1]
            elif k == KIND_BOOL:
                objs[i] = bool(w[o + 1])
            elif k == KIND_BYTES:
                objs[i] = (bytearray if w[o + 3] else bytes)(text[w[o + 1]:w[o + 1] + w[o + 2]])
            elif k == KIND_OBJECT:
                name = tab.str(w[o + 1], w[o + 2])
                c = _torch_constant(self.torch, name) if w[o + 3] < 0 and w[o + 4] < 0 else None
                # a dtype or qscheme value (torch.float32) is data, not a call
                objs[i] = c if c is not None else Opaque(name)
            elif k != KIND_NONE:
                raise errors.FormatError("value of unknown kind %d" % k, self.src.path)
            if KIND_BOOL <= k <= KIND_FLOAT and w[o + 4]:
                # a numpy scalar: the same type and value back
                objs[i] = _numpy_dtype(w[o + 4]).type(objs[i])
        refs = tab.refs_at
        for i in range(n):
            o = i * NODE_WORDS
            k = w[o]
            if k < KIND_LIST or k == KIND_TENSOR:
                continue
            if k == KIND_OBJECT:
                if isinstance(objs[i], Opaque):
                    args, state = w[o + 3], w[o + 4]
                    objs[i].args = self._child(objs, args) if args >= 0 else None
                    objs[i].state = self._child(objs, state) if state >= 0 else None
                    objs[i] = _pure_call(self.torch, objs[i])
                continue
            a = refs + w[o + 1]
            items = [objs[j] for j in w[a:a + w[o + 2] * (2 if k == KIND_DICT else 1)].tolist()]
            if any(x is pending for x in items):
                raise errors.FormatError("a tuple or set contains itself", self.src.path)
            if k == KIND_DICT and w[o + 4] >= 0:
                # the attributes BUILD set (a state dict's _metadata)
                attrs = self._child(objs, w[o + 4])
                for key, val in (attrs.items() if isinstance(attrs, dict) else ()):
                    if isinstance(key, str):
                        setattr(objs[i], key, val)
            try:
                if k == KIND_DICT:
                    d = objs[i]
                    if type(d) is dict:
                        d.update(zip(items[0::2], items[1::2]))
                    else:  # Counter.update would count the pairs
                        for key, val in zip(items[0::2], items[1::2]):
                            d[key] = val
                elif k == KIND_LIST:
                    objs[i].extend(items)
                elif k == KIND_TUPLE:
                    objs[i] = self.torch.Size(items) if w[o + 3] else tuple(items)
                else:
                    objs[i] = (frozenset if w[o + 3] else set)(items)
            except TypeError as exc:  # an unhashable key or set element
                op = {KIND_DICT: "dict", KIND_SET: "set", KIND_LIST: "list"}.get(k, "tuple")
                raise errors.FormatError("%s: %s" % (op, exc), self.src.path) from None
        return objs[n - 1]

    def _device(self, text):
        try:
            return self.torch.device(text)
        except RuntimeError as exc:  # torch.device refuses the text, as torch.load would
            raise errors.FormatError("torch.device(%r): %s" % (text, exc), self.src.path) from None

    def _child(self, objs, j):
        if objs[j] is self._PENDING:
            raise errors.FormatError("a tuple or set contains itself", self.src.path)
        return objs[j]

    def tensor(self, j):
        """The tensor (or numpy array) of table record j (see _tensor)."""
        return self._place(*self.table.record(j))

    def tensor_of(self, t):
        """The tensor of ckpt_tensor t, its bytes read."""
        out = self._place(*_record_of(t, self.text))
        self.read()
        return out

    def _str(self, off, n):
        text = self.table.text if self.table is not None else self.text
        return bytes(text[off:off + n]).decode("utf-8", "surrogateescape")

    def _place(self, r, shape, stride):
        flags = r[T_FLAGS]
        if self.load_types and flags & TABLE_NUMPY:  # stay numpy, on the CPU
            return self._numpy(r, shape, stride)
        out = self._tensor(r, shape, stride)
        if isinstance(out, RawTensor) or self.placeholders is not None:
            return out
        if self.load_types:
            out = self._as_saved(flags, out)
        if self.map_location is None:
            return out
        where = self.map_location
        if isinstance(where, dict):  # torch.load's {saved device: target}
            saved = self._str(r[T_DEVICE], r[T_DEVICE_LEN])
            where = where.get(saved, saved)
        elif callable(where):  # torch.load's map_location(storage, location)
            where = (where, self._str(r[T_DEVICE], r[T_DEVICE_LEN]))
        # moved once its bytes are read (relocate); tied tensors stay tied
        self.moves[id(out)] = (out, where)
        return out

    def _as_saved(self, flags, out):
        """out as torch.load rebuilds it: an nn.Parameter with its
        requires_grad, or a tensor saved with requires_grad=True."""
        requires_grad = bool(flags & TABLE_REQUIRES_GRAD)
        if flags & TABLE_PARAMETER:
            return self.torch.nn.Parameter(out, requires_grad=requires_grad)
        if requires_grad and (out.is_floating_point() or out.is_complex()):
            out.requires_grad_(True)
        return out

    def relocate(self, obj):
        """obj with every tensor tensor() planned a move for replaced by
        its moved copy (after read(): the bytes are in place).
        Containers are the converter's own, so they are updated in place;
        tuples are rebuilt."""
        if not self.moves:
            return obj
        moved, seen, checked = {}, {}, {}

        def visit(x):
            if id(x) in seen:
                return seen[id(x)]
            if isinstance(x, self.torch.Tensor):
                if id(x) in self.moves and id(x) not in moved:
                    t, where = self.moves[id(x)]
                    if isinstance(where, tuple):
                        where = self._mapped(t, *where)
                        if where is None:  # the function kept the storage
                            return x
                    if where not in checked:
                        checked[where] = check_device(where, "map_location", self.src.path)
                    # a leaf there, as torch.load rebuilds it: Parameter or
                    # requires_grad kept
                    m = t.detach().to(checked[where])
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

    def _mapped(self, t, fn, saved):
        """Where a map_location function sends tensor t: torch.load calls
        it with the storage (on the CPU) and the saved location; the
        storage it returns is where the tensor goes (None when it is the
        one given: the tensor stays), and None from the function means the
        saved location (torch's default_restore_location)."""
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        got = fn(storage, saved)
        if got is None:
            return saved
        if got is storage:
            return None
        if not self.torch.is_storage(got):  # a Tensor: torch's TypedStorage refuses it too
            raise errors.InvalidArgumentError(
                "map_location(storage, %r) returned a %s, not a storage (or None)"
                % (saved, type(got).__name__), self.src.path)
        return got.device

    def _numpy(self, r, shape, stride):
        """A numpy array saved as one: its own copy (numpy pickles hold
        the bytes), in the saved memory order (C or Fortran)."""
        import numpy as np
        out = np.empty(shape, dtype=_numpy_dtype(r[T_DTYPE]))
        fortran = [1]
        for d in shape[:-1]:
            fortran.append(fortran[-1] * d)
        if len(shape) > 1 and not r[T_FLAGS] & TABLE_CONTIGUOUS and stride == fortran:
            if out.nbytes:  # read now: the Fortran-order copy is made of the bytes
                check(lib.ckpt_tensor_read(r[T_PTR], out.ctypes.data, out.nbytes), self.src.path)
            return np.asfortranarray(out)
        if out.nbytes:  # filled by read()
            self.copies.append((r[T_PTR], out.ctypes.data, out))
        return out

    def _tensor(self, r, shape, stride):
        torch = self.torch
        name, tdt, bits = _dtype_info(r[T_DTYPE])
        if name == "F4" and hasattr(torch, "float4_e2m1fn_x2"):
            return self._f4(r, shape)
        if tdt is None:
            return RawTensor(name, shape, self._copy(r, torch.uint8, [r[T_NBYTES]]))
        empty = r[T_NUMEL] == 0
        view_dt = torch.uint8 if tdt is torch.bool else tdt
        if self.placeholders is not None and bits % 8 == 0 and not empty:
            meta = torch.empty(shape, dtype=tdt, device="meta")
            self.placeholders[id(meta)] = (meta, r[T_PTR])
            return meta
        # mmap: a view of the mapping when the bytes allow one; else (and by
        # default) a view of the storage's private buffer, so that tensors
        # sharing a storage share memory either way
        out = self._view(r, view_dt, bits // 8, shape, stride) if self.src.mmap else None
        if out is not None:
            # a byte other than 0/1 is not a valid torch bool: normalise
            if tdt is torch.bool:
                return out.view(torch.bool) if empty or int(out.max()) <= 1 else out != 0
            return out
        if self.plan:
            out = self._planned(r, view_dt, bits // 8, shape, stride)
        if out is None:
            if empty:  # no bytes to read, no storage shared: as torch.load's own
                return torch.empty_strided(shape, stride, dtype=tdt)
            out = self._copy(r, view_dt, shape)
        if tdt is torch.bool:  # normalised once the bytes are read
            self.bools.append(out)
            return out.view(torch.bool)
        return out

    def _f4(self, r, shape):
        """safetensors F4 as its torch loader gives it: float4_e2m1fn_x2, one
        element per byte (two F4 values), the last dimension halved."""
        if not shape or shape[-1] % 2:
            raise errors.UnsupportedError(
                "an F4 tensor of shape %s has no torch.float4_e2m1fn_x2 form: its last "
                "dimension must be even (safetensors' torch loader refuses it too)"
                % list(shape), file=self.src.path)
        data = self._copy(r, self.torch.uint8, [r[T_NBYTES]])
        return data.view(list(shape[:-1]) + [shape[-1] // 2]).view(self.torch.float4_e2m1fn_x2)

    def _view(self, r, dt, esz, shape, stride):
        if esz == 0:
            return None
        src = self.src
        flags = r[T_FLAGS]
        if src.buf is not None:
            # zero-copy only when libckpt hands out the bytes (contiguous,
            # little-endian) and they lie in our mapping; a strided view of
            # a storage whose bytes are the file's as they are (RAW, at a
            # file offset: the mapping is the whole file) is mapped too, so
            # that it shares memory with the storage's other tensors as in
            # torch.load(mmap=True) (it was a private copy)
            buf = src.buf
            if r[T_DATA]:
                off = r[T_DATA] - src.addr
            elif not flags & TABLE_CONTIGUOUS and flags & TABLE_RAW and r[T_FILE_OFFSET] >= 0:
                off = r[T_FILE_OFFSET]
            else:
                return None  # bytes libckpt inflated or built itself
            if off < 0 or (flags & TABLE_CONTIGUOUS and off + r[T_NBYTES] > len(buf)):
                return None
        else:
            loc = src.locate(r[T_FLAGS] & TABLE_CONTIGUOUS, r[T_FILE_OFFSET],
                             self._str(r[T_MEMBER], r[T_MEMBER_LEN]))
            if loc is None:
                return None
            buf, off = loc
        soff = r[T_STORAGE_OFFSET]
        start = off - soff * esz
        snbytes = r[T_STORAGE_NBYTES]
        # natural alignment (mappings are page-aligned), storage inside buf
        if start < 0 or start % esz or start + snbytes > len(buf) or snbytes < esz:
            return None  # (frombuffer takes no empty storage)
        key = (id(buf), r[T_STORAGE_ID], dt)
        base = self.bases.get(key)
        if base is None:  # one base per storage: views of it share memory
            base = self.torch.frombuffer(buf, dtype=dt, count=snbytes // esz, offset=start)
            self.bases[key] = base
        numel = r[T_NUMEL]
        if not flags & TABLE_CONTIGUOUS:
            # the storage holds every element the strides reach
            last = sum((n - 1) * st for n, st in zip(shape, stride)) if numel else 0
            if soff + last >= base.numel():
                return None
            return base.as_strided(shape, stride, soff)
        if soff + numel > base.numel():
            return None
        return base[soff:soff + numel].view(shape)

    def _planned(self, r, dt, esz, shape, stride):
        """A view of the private buffer of r's storage (allocated here,
        filled by read), or None when its bytes need converting (sub-byte
        dtype, big-endian storage, a storage ckpt.structure rebuilt): then
        it is copied."""
        flags = r[T_FLAGS]
        if esz == 0 or not flags & TABLE_RAW:
            return None
        sid = r[T_STORAGE_ID]
        buffers = self.buffers
        if flags & TABLE_WHOLE and sid not in buffers:
            # the tensor is its storage: allocated as itself (most tensors)
            out = buffers[sid] = self.torch.empty(shape, dtype=dt)
            return out
        key = (sid, dt)
        base = self.bases.get(key)
        if base is None:  # one typed base per storage: views of it share memory
            raw = buffers.get(sid)
            if raw is None:
                raw = buffers[sid] = self.torch.empty(r[T_STORAGE_NBYTES], dtype=self.torch.uint8)
            elif raw.dtype is not self.torch.uint8 or raw.dim() != 1:
                raw = raw.reshape(-1).view(self.torch.uint8)  # a WHOLE tensor's bytes
            usable = raw.numel() - raw.numel() % esz
            base = self.bases[key] = raw[:usable].view(dt)
        # libckpt checked the view against its storage at open
        return self.torch.as_strided(base, shape, stride, r[T_STORAGE_OFFSET])

    def _copy(self, r, dt, shape):
        """A tensor for r's logical contents, filled by read()."""
        out = self.torch.empty(shape, dtype=dt)
        self.copies.append((r[T_PTR], out.data_ptr(), out))
        return out

    def read(self):
        """Fills every planned buffer and copy: one C call each, in file
        order, with large sequential reads."""
        src = self.src
        # the destinations stay referenced (buffers, copies) until the C
        # call has written them: one the result no longer holds (a dict key
        # a later equal key replaced: {1: a, True: b}) was freed before it
        # and written after, corrupting the heap
        buffers, self.buffers = self.buffers, {}
        if buffers:
            n = len(buffers)
            ids = (c_u64 * n)(*buffers.keys())
            dst = (ctypes.c_void_p * n)(*[b.data_ptr() for b in buffers.values()])
            check(lib.ckpt_file_read_storages(src.handle, n, ids, dst), src.path)
        copies, self.copies = self.copies, []
        if copies:
            n = len(copies)
            ts = (ctypes.c_void_p * n)(*[c[0] for c in copies])
            dst = (ctypes.c_void_p * n)(*[c[1] for c in copies])
            check(lib.ckpt_file_read_tensors(src.handle, n, ts, dst), src.path)
        for b in self.bools:  # a byte other than 0/1 is not a valid torch bool
            b.clamp_(max=1)
        self.bools = []


def check_device(where, what, path):
    """where (a device name, a torch.device) as a torch.device this torch
    can place tensors on, else ckpt.DeviceError naming it (`what` is the
    argument that gave it), in torch.load's words for CUDA."""
    import torch
    try:
        dev = torch.device(where)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise errors.DeviceError("%s %r is no device torch knows: %s" % (what, where, exc),
                                 os.fspath(path)) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise errors.DeviceError(
            "%s %r: attempting to place tensors on a CUDA device but torch.cuda.is_available() "
            "is False; on a CPU-only machine pass %s=\"cpu\"" % (what, where, what),
            os.fspath(path))
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise errors.DeviceError("%s %r: attempting to place tensors on CUDA device %d but "
                                 "torch.cuda.device_count() is %d" % (
                                     what, where, dev.index, torch.cuda.device_count()),
                                 os.fspath(path))
    try:
        torch.empty(0, device=dev)
    except (AssertionError, RuntimeError) as exc:  # a backend this build or machine lacks
        raise errors.DeviceError("%s %r: torch cannot place tensors there: %s" % (
            what, where, (str(exc).splitlines() or [""])[0]), os.fspath(path)) from None
    return dev


def load(path, *, unsafe_ok=False, allow=(), map_location=None, mmap=False, device=None,
         weights_only=None):
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
    Like torch.load, no checksum is checked (zip CRC-32s, ckpt's digests):
    a flipped bit in tensor data loads as a wrong value; ckpt.verify(path)
    first when that matters.

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
    "cuda:0"}) moves those saved on a listed device, a function
    (storage, location) is called with each tensor's storage on the CPU
    and its saved location: the tensor goes to the device of the storage
    it returns (`lambda storage, loc: storage` keeps it on the CPU; None:
    the saved location). Moved tensors are copies, one per tensor.
    weights_only (torch.load's name): True or None is what ckpt.load
    always does (nothing runs; unsafe files are refused); False, torch's
    "run the file's code", has no equivalent and raises
    ckpt.InvalidArgumentError (unsafe_ok=True and allow are the ways to
    read such a file's data). device (safetensors' load_file and ckpt.open
    name it so) is map_location given as one device, a name or a
    torch.device; giving both is ckpt.InvalidArgumentError. A device this
    torch cannot place tensors on (map_location="cuda" on a CPU-only
    machine, an unknown name) raises ckpt.DeviceError, an
    InvalidArgumentError that is also the RuntimeError torch.load raises,
    before the file is read when map_location is one device. Raises
    ckpt.Error subclasses."""
    path = errors.path_arg(path, "ckpt.load")
    map_location = _where(map_location, device, path)
    import torch
    if isinstance(map_location, (str, torch.device)):
        check_device(map_location, "device" if device is not None else "map_location", path)
    if weights_only is not None and not weights_only:
        raise errors.InvalidArgumentError(
            "weights_only=False: ckpt.load never runs the file's code; to read the data "
            "of a file the scan refuses, pass unsafe_ok=True (objects built by a call "
            "come back as ckpt.Opaque) or allow=(\"module.qualname\", ...)",
            os.fspath(path))
    src = _Source(path, scan=True, allow=allow, unsafe_ok=unsafe_ok, mmap=mmap)
    try:
        # the tree the file was saved from (for safetensors written by ckpt,
        # decoded from "ckpt.structure" by libckpt)
        conv = _Converter(src, map_location)
        obj = conv.convert()
        conv.read()
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
            self.obj = self.conv.convert()
            self.conv.read()
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


def metadata(path):
    """The file's metadata as a dict of str to str (values ckpt.save stored
    as JSON, listed in "ckpt.meta_json", decoded): safetensors
    "__metadata__", a sharded index's "metadata" (for the index or its
    folder; other values than str as compact JSON text; the shards' own
    __metadata__ are not the set's), or the record ckpt writes into torch
    archives (ckpt.save's meta, "ckpt.xxh3" digests); None when the file
    has none. The same as ckpt.open(path).metadata() and `ckpt inspect`."""
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
