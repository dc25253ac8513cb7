"""ckpt.save: Python data (a module, a training state) written by the C
writer through the public tree builder (ckpt_tree_*): atomic and durable
(temporary file, fsync, rename, fsync of the directory), per-tensor digests
embedded, format chosen by the file extension."""
import collections
import ctypes
import json
import numbers
import os
import sys
import warnings

from . import errors
from ._lib import (WriteOptions_, c_char_p, c_u64, c_void_p, check,
                   lib, options)
from ._module import audit, dtype_name




FORMATS = {".safetensors": 1, ".pt": 3, ".pth": 3, ".bin": 3, ".ckpt": 3}

_NUMPY = {"b": "BOOL", "u1": "U8", "i1": "I8", "i2": "I16", "u2": "U16", "i4": "I32",
          "u4": "U32", "i8": "I64", "u8": "U64", "f2": "F16", "f4": "F32", "f8": "F64",
          "c8": "C64", "c16": "C128"}


# the mappings torch.save pickles as classes torch.load(weights_only=True)
# builds (Counter since torch 2.4), with their ckpt_tree_set_dict_class word
_DICTS = {dict: None, collections.OrderedDict: b"collections.OrderedDict",
          collections.Counter: b"collections.Counter"}


class AuditWarning(UserWarning):
    """ckpt.save found state the checkpoint will not hold (ckpt.audit)."""


class _Builder:
    """Python objects -> a ckpt_tree. Tensors are borrowed by the tree, so
    every buffer handed to it is kept in self.keep until the write."""

    def __init__(self, path, snapshot=None):
        import torch
        self.torch = torch
        self.path = path
        # snapshot (a dict, or None): the tree holds private copies of every
        # tensor and array (host memory), so that the caller may change its
        # own right away. The copies are taken from and given back to the
        # dict, (dtype, shape) -> tensors: a training loop snapshots the
        # same shapes every time, and writing into memory already mapped
        # costs no page faults (orbax and DCP keep their buffers too).
        self.snapshot = snapshot
        self.copies = []
        self.tree = c_void_p()
        check(lib.ckpt_tree_new(ctypes.byref(self.tree)), path)
        self.keep = []
        self.memo = {}
        self.findings = []
        self.optimizers = {}  # tree path -> "module.qualname" of the class
        self.modules = {}     # tree path -> the nn.Module saved there
        self.devices = set()  # where the saved tensors were

    def free(self):
        lib.ckpt_tree_free(self.tree)
        self.tree = c_void_p()
        self.keep = []
        for c in self.copies:
            self.snapshot.setdefault((c.dtype, tuple(c.shape)), []).append(c)
        self.copies = []

    def _copy(self, c):
        spare = self.snapshot.get((c.dtype, tuple(c.shape)))
        out = spare.pop() if spare else self.torch.empty(c.shape, dtype=c.dtype, device="cpu")
        out.copy_(c)  # from any device and layout into a contiguous CPU tensor
        self.copies.append(out)
        return out

    def _class(self, v, cls):
        """v made the class torch.load gives back (ckpt_tree_set_class)."""
        if cls is not None:
            check(lib.ckpt_tree_set_class(self.tree, v, cls), self.path)
        return v

    def _new(self, fn, *args):
        out = c_void_p()
        check(fn(ctypes.byref(out), self.tree, *args), self.path)
        return out

    def _refuse(self, where, what):
        return errors.UnsupportedError(
            "%s: %s cannot be saved: ckpt writes data only (tensors, numbers, strings, "
            "bytes, None, dicts, lists, tuples, sets)" % (where or "<root>", what), self.path)

    def value(self, obj, where=""):
        torch = self.torch
        if obj is None:
            return self._new(lib.ckpt_tree_none)
        np = sys.modules.get("numpy")  # (no numpy: no numpy values)
        if np is not None and isinstance(obj, (np.ndarray, np.generic)):
            if type(obj) is np.ndarray:
                return self.array(obj, where)
            if type(obj).__module__ == "numpy" and not isinstance(obj, np.ndarray):
                return self.numpy_scalar(obj, where)
            raise errors.UnsupportedError(
                "%s: a %s.%s cannot be saved: torch.save pickles that class, which "
                "torch.load(weights_only=True) does not build (pass numpy.asarray(obj) or "
                "obj.item())" % (where or "<root>", type(obj).__module__,
                                 type(obj).__qualname__), self.path)
        if type(obj) is bool:
            return self._new(lib.ckpt_tree_bool, int(obj))
        if type(obj) is int:
            return self._int(obj, where)
        if type(obj) is float:
            return self._new(lib.ckpt_tree_float, obj)
        if type(obj) is str:
            try:
                b = obj.encode("utf-8")
            except UnicodeEncodeError:
                raise self._refuse(where, "a string that is not valid Unicode") from None
            return self._new(lib.ckpt_tree_str, b, len(b))
        if type(obj) is bytes:
            return self._new(lib.ckpt_tree_bytes, obj, len(obj))
        if isinstance(obj, torch.device):
            b = str(obj).encode()
            return self._class(self._new(lib.ckpt_tree_str, b, len(b)), b"torch.device")
        if isinstance(obj, torch.Tensor):
            return self.tensor(obj, where)
        if type(obj) is complex or isinstance(obj, (torch.layout, torch.qscheme)):
            # ckpt.load gives these back (torch.load(weights_only=True)
            # builds them); the writer has no such value
            raise errors.UnsupportedError(
                "%s: %s cannot be saved: ckpt's writer has no such value, though "
                "torch.load(weights_only=True) builds it%s"
                % (where or "<root>", "a complex number" if type(obj) is complex else obj,
                   " (torch.tensor(obj) saves it as a complex tensor)"
                   if type(obj) is complex else ""), self.path)
        if isinstance(obj, (bool, numbers.Number, str, bytes, memoryview)):
            # an IntEnum, a str subclass...: torch.save pickles its class,
            # which torch.load(weights_only=True) refuses; a memoryview
            # torch.save cannot pickle
            raise self._refuse_class(where, obj)
        if isinstance(obj, torch.nn.Module):
            self.modules.setdefault(where, obj)
            found = audit(obj)
            self.findings.extend(f if not where else _located(f, where) for f in found)
            return self.value(obj.state_dict(), where)
        if hasattr(obj, "state_dict") and callable(obj.state_dict) and not isinstance(obj, type):
            if isinstance(obj, torch.optim.Optimizer):
                cls = type(obj)
                self.optimizers[where] = "%s.%s" % (cls.__module__, cls.__qualname__)
            return self.value(obj.state_dict(), where)  # optimizer, scheduler, scaler
        key = id(obj)
        if key in self.memo:  # a shared sub-object stays shared
            return self.memo[key]
        self.keep.append(obj)  # alive until the write, so its id is not reused
        if isinstance(obj, bytearray):  # mutable: one object however often reached
            b = bytes(obj)
            out = self.memo[key] = self._new(lib.ckpt_tree_bytes, b, len(b))
            return self._class(out, b"builtins.bytearray")
        if type(obj) in _DICTS:
            out = self.memo[key] = self._new(lib.ckpt_tree_dict)
            for k, v in obj.items():
                kv = self.value(k, "%s[%r]" % (where, k))
                check(lib.ckpt_tree_set(self.tree, out, kv,
                                        self.value(v, _join(where, k))), self.path)
            if type(obj) is not dict:
                check(lib.ckpt_tree_set_dict_class(self.tree, out, _DICTS[type(obj)]), self.path)
            # OrderedDict.__reduce__ pickles the instance's attributes (a
            # state dict's _metadata: each module's version) for BUILD;
            # Counter.__reduce__ leaves them out, and so does torch.save
            state = vars(obj) if type(obj) is collections.OrderedDict else None
            if state:
                check(lib.ckpt_tree_set_dict_state(self.tree, out, self.value(state, where)),
                      self.path)
            return out
        if type(obj) in (list, tuple, torch.Size):
            out = self.memo[key] = self._new(
                lib.ckpt_tree_list if isinstance(obj, list) else lib.ckpt_tree_tuple)
            for i, v in enumerate(obj):
                check(lib.ckpt_tree_append(self.tree, out, self.value(v, _join(where, i))),
                      self.path)
            return self._class(out, b"torch.Size" if isinstance(obj, torch.Size) else None)
        if type(obj) in (set, frozenset):
            # as torch.save pickles them: builtins.set / builtins.frozenset
            out = self.memo[key] = self._new(lib.ckpt_tree_empty_set)
            for i, v in enumerate(obj):
                check(lib.ckpt_tree_append(self.tree, out, self.value(v, _join(where, i))),
                      self.path)
            return self._class(out, b"builtins.frozenset" if isinstance(obj, frozenset) else None)
        if isinstance(obj, (dict, list, tuple, set, frozenset)):
            # a subclass (defaultdict, namedtuple...): torch.save pickles its
            # class, which torch.load(weights_only=True) refuses and which
            # ckpt would not write back as that class
            raise self._refuse_class(where, obj)
        raise self._refuse(where, "%s.%s" % (type(obj).__module__, type(obj).__qualname__))

    def _refuse_class(self, where, obj):
        cls = type(obj)
        base = next((b for b in (dict, list, tuple, set, frozenset, int, float, complex, str,
                                 bytes) if isinstance(obj, b)), bytes)  # bytes: a memoryview
        why = ("torch.save cannot pickle it" if isinstance(obj, memoryview) else
               "torch.save pickles that class, which torch.load(weights_only=True) does not "
               "build, and ckpt keeps every type as it is")
        return errors.UnsupportedError(
            "%s: a %s.%s cannot be saved: %s (pass %s(obj) to save the plain %s)"
            % (where or "<root>", cls.__module__, cls.__qualname__, why, base.__name__,
               base.__name__), self.path)

    def _int(self, v, where):
        if not -2 ** 63 <= v < 2 ** 63:
            raise self._refuse(where, "an integer beyond 64 bits")
        return self._new(lib.ckpt_tree_int, v)

    def numpy_scalar(self, x, where):
        """A numpy scalar as torch.save pickles it (numpy.core.multiarray.
        scalar), which torch.load(weights_only=True) refuses as it refuses
        torch.save's."""
        code = _numpy_code(x.dtype)
        if code is None or x.dtype.kind not in "biuf" or x.dtype.byteorder == ">":
            raise errors.UnsupportedError(
                "%s: a numpy.%s scalar cannot be saved: ckpt writes numpy scalars of bool, "
                "int, uint and float16/32/64 dtypes (pass x.item() to save it as a Python "
                "value)" % (where or "<root>", type(x).__name__), self.path)
        v = x.item()
        if x.dtype.kind == "b":
            out = self._new(lib.ckpt_tree_bool, int(v))
        elif x.dtype.kind == "f":
            out = self._new(lib.ckpt_tree_float, float(v))
        else:
            out = self._int(v, where)
        check(lib.ckpt_tree_set_numpy(self.tree, out, code), self.path)
        return out

    def tensor(self, t, where):
        torch = self.torch
        if t.layout != torch.strided or t.is_quantized:
            raise self._refuse(where, "a %s tensor" % ("quantized" if t.is_quantized else "sparse"))
        param = type(t) is torch.nn.Parameter
        if type(t) is not torch.Tensor and not param:
            raise self._refuse(where, "a tensor of the subclass %s.%s (torch.save pickles its "
                               "class, which torch.load(weights_only=True) does not build)"
                               % (type(t).__module__, type(t).__qualname__))
        if getattr(t, "__dict__", None):
            # torch.save pickles them (_rebuild_parameter_with_state,
            # _rebuild_from_type_v2); a tensor in the tree holds none
            raise self._refuse(where, "a %s with attributes (%s)" % (
                "Parameter" if param else "tensor", ", ".join(sorted(vars(t)))))
        ptr = t.data_ptr()
        # tied weights: state_dict() hands out a new tensor object per name,
        # so identity is the memory and the view, as torch.save sees it; a
        # Parameter over that memory is another object over the same
        # storage (torch.save drops a Parameter's hooks, so does ckpt)
        mem = ("t", t.device.type, ptr, tuple(t.shape), t.stride(), t.dtype) if ptr else id(t)
        key = (mem, param, t.requires_grad)
        if key in self.memo:
            return self.memo[key]
        if mem in self.memo:
            out = self._new(lib.ckpt_tree_tensor_alias, self.memo[mem])
        else:
            out = self.memo[mem] = self._view(t, where)
        if param:
            check(lib.ckpt_tree_set_parameter(self.tree, out, int(t.requires_grad)), self.path)
        elif t.requires_grad:  # torch.save writes it, torch.load gives it back
            check(lib.ckpt_tree_set_requires_grad(self.tree, out, 1), self.path)
        self.memo[key] = out
        return out

    def _view(self, t, where):
        """t over its whole storage, as torch.save writes it: every tensor
        over one storage (a view beside its base, x[1:], x.t()) is a view
        of one storage record, the bytes of the whole storage written once.
        A conjugate or negative view (resolved: its bytes are not the
        storage's) and a tensor without memory get their own storage."""
        if not t.data_ptr() or t.is_conj() or t.is_neg():
            return self._data(t, where)
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()  # torch 1.x
        skey = ("s", t.device, st.data_ptr())
        if skey not in self.memo:
            n = st.nbytes() // t.element_size()
            if not t.storage_offset() and t.numel() == n and t.is_contiguous():
                out = self._data(t, where)  # the whole storage (most tensors): no view
                self.memo[skey] = (out, t.dtype)
                return out
            self.memo[skey] = (self._data(t.as_strided((n,), (1,), 0), where), t.dtype)
        base, dtype = self.memo[skey]
        if dtype != t.dtype:
            raise errors.UnsupportedError(
                "%s: a tensor of %s over the memory of a tensor of %s cannot be saved: "
                "torch.save refuses one storage as two dtypes (pass a .clone())"
                % (where or "<root>", t.dtype, dtype), self.path)
        n = t.dim()
        return self._new(lib.ckpt_tree_tensor_view, base, n, (c_u64 * max(1, n))(*t.shape),
                         (c_u64 * max(1, n))(*t.stride()), t.storage_offset())

    def _data(self, t, where):
        """A tensor node of t's elements, contiguous in host memory."""
        self.keep.append(t)  # its memory (and id) stay taken until the write
        self.devices.add(str(t.device))
        code = lib.ckpt_dtype_from_name(dtype_name(t.dtype).encode())
        if code == 0:
            raise self._refuse(where, "a tensor of dtype %s" % t.dtype)
        c = t.detach().resolve_conj().resolve_neg()
        if self.snapshot is not None:
            c = self._copy(c)  # into host memory of our own, at this moment
        else:
            if c.device.type != "cpu":
                c = c.cpu()
            c = c.contiguous()
        self.keep.append(c)
        nbytes = c.numel() * c.element_size()
        return self._shaped(code, list(c.shape), c.data_ptr() if nbytes else None, nbytes)

    def array(self, a, where):
        """A numpy array as torch.save pickles it (numpy's own reduce: one
        object however often reached, its own bytes), which
        torch.load(weights_only=True) refuses as it refuses torch.save's."""
        import numpy as np
        if id(a) in self.memo:
            return self.memo[id(a)]
        code = _numpy_code(a.dtype)
        if code is None or a.dtype.byteorder == ">":
            raise errors.UnsupportedError(
                "%s: a numpy array of dtype %s cannot be saved: ckpt writes numpy arrays of "
                "bool, int, uint, float16/32/64 and complex64/128 dtypes in little-endian "
                "order (pass a.astype(...) or torch.from_numpy(a) to save another)"
                % (where or "<root>", a.dtype.str), self.path)
        self.keep.append(a)  # its id stays taken until the write
        c = a if a.flags.c_contiguous else a.copy(order="C")  # (ascontiguousarray: ndim >= 1)
        if self.snapshot is not None and np.may_share_memory(c, a):
            c = c.copy()
        self.keep.append(c)
        out = self._shaped(code, list(c.shape), c.ctypes.data if c.nbytes else None, c.nbytes)
        check(lib.ckpt_tree_set_numpy(self.tree, out, code), self.path)
        self.memo[id(a)] = out
        return out

    def _shaped(self, code, shape, ptr, nbytes):
        dims = (c_u64 * max(1, len(shape)))(*shape)
        return self._new(lib.ckpt_tree_tensor, code, len(shape), dims, ptr, nbytes)


def _numpy_code(dtype):
    """The ckpt_dtype of a numpy dtype, or None."""
    kind = _NUMPY.get(dtype.kind + str(dtype.itemsize) if dtype.kind != "b" else "b")
    return lib.ckpt_dtype_from_name(kind.encode()) if kind else None


def _saved_with(b, record_source):
    """What the file does not carry about where it was saved, as the
    "ckpt.versions", "ckpt.model", "ckpt.dtype" and "ckpt.device" records
    (JSON values): torch, Python, ckpt (and numpy) versions; each module's
    class ("module.qualname") and, unless record_source is False, the file
    that defines it; the default dtype, the autocast dtype of each device
    type where autocast is on, and how many parameters have each dtype; the
    device(s) the tensors were on."""
    import inspect
    import platform
    import sys
    torch = b.torch
    from ._lib import VERSION
    versions = {"torch": torch.__version__, "python": platform.python_version(),
                "ckpt": VERSION}
    if "numpy" in sys.modules:
        versions["numpy"] = sys.modules["numpy"].__version__
    out = {"ckpt.versions": versions}
    models, params = {}, {}
    for where, m in b.modules.items():
        cls = type(m)
        rec = {"class": "%s.%s" % (cls.__module__, cls.__qualname__)}
        if record_source:
            try:
                rec["source"] = inspect.getsourcefile(cls)
            except (TypeError, OSError):
                pass  # defined in C or interactively: no file to name
        models[where] = rec
        for p in m.parameters():
            name = str(p.dtype)
            params[name] = params.get(name, 0) + 1
    if models:
        out["ckpt.model"] = models
    dtype = {"default": str(torch.get_default_dtype())}
    autocast = {}
    for dev in ("cpu", "cuda"):
        try:  # torch 2.4+: per device type; older: cuda and cpu functions
            on = torch.is_autocast_enabled(dev)
            dt = torch.get_autocast_dtype(dev) if on else None
        except (TypeError, AttributeError):
            on = torch.is_autocast_cpu_enabled() if dev == "cpu" else torch.is_autocast_enabled()
            dt = (torch.get_autocast_cpu_dtype() if dev == "cpu"
                  else torch.get_autocast_gpu_dtype()) if on else None
        if on:
            autocast[dev] = str(dt)
    if autocast:
        dtype["autocast"] = autocast
    if params:
        dtype["parameters"] = params
    out["ckpt.dtype"] = dtype
    if b.devices:
        out["ckpt.device"] = ", ".join(sorted(b.devices))
    return out


def _join(where, k):
    return "%s.%s" % (where, k) if where else str(k)


def _located(f, where):
    from ._module import AuditFinding
    names = tuple("%s.%s" % (where, n) for n in f.names)
    return AuditFinding(f.kind, names, "%s: %s" % (where, f.message))


def save(obj, path, *, meta=None, record_source=True):
    """Writes `obj` to `path` atomically and durably (a temporary file in
    the same directory, fsync, rename, fsync of the directory: a crash
    leaves either the old file or the new one). The format follows the
    extension: ".safetensors" (nesting and non-tensor values recorded in
    the metadata "ckpt.structure"), or ".pt"/".pth"/".bin"/".ckpt" (a
    torch.save archive that torch.load(weights_only=True) reads). Digests
    of every tensor are embedded (ckpt verify checks them). meta: extra
    metadata, str keys (not starting with "ckpt.") to JSON-encodable
    values: a value that is not a str is stored as JSON text and its key
    listed in the entry "ckpt.meta_json", so that ckpt.metadata reads the
    same value back (safetensors' __metadata__ stays str to str). The class
    of each optimizer in obj is recorded ("ckpt.optimizers": tree path ->
    "module.qualname") for Store.resume. So is what the file does not
    carry about where it was saved (ckpt.metadata gives it back, ckpt
    doctor shows it): "ckpt.versions" (torch, Python, ckpt, numpy),
    "ckpt.model" (each module's class and source file; record_source=False
    leaves the file path out), "ckpt.dtype" (torch.get_default_dtype(),
    the autocast dtype where autocast is on, the parameters' dtypes
    counted), "ckpt.device" (where the tensors were).

    obj: tensors, numbers, strings, bytes, None, dicts, lists, tuples, sets
    and frozensets (pickled as torch.save pickles them: torch's
    weights_only=True loads a set where its allowlist has builtins.set, as
    2.13's does and 1.13's does not, and never a frozenset), numpy arrays
    and scalars of bool, int, uint and float dtypes (kept numpy values, as
    torch.save keeps them: torch.load(weights_only=True) refuses them in
    both files); a value reached twice is one object when loaded, as with
    torch.save; an nn.Module is saved as its state_dict(), other objects
    with a state_dict() method (optimizers, schedulers, scalers) likewise.
    Types stay what torch.save keeps: an OrderedDict with its attributes
    (a state dict's _metadata, which load_state_dict reads), a Counter, an
    nn.Parameter with its requires_grad (its backward hooks dropped, as
    torch.save drops them), a tensor's requires_grad. What torch.save
    pickles as a class torch.load(weights_only=True) does not build is
    refused (ckpt.UnsupportedError), never saved as another type: a
    subclass of dict, list, tuple, set, int, float, str or bytes
    (defaultdict, a namedtuple, an IntEnum), a numpy array subclass, a
    tensor subclass, a tensor or Parameter with attributes; so is what
    torch.save cannot pickle (a memoryview). The message names the value's
    place in obj and the conversion that saves it.
    Tensors are saved on CPU as torch.save saves them: each storage once,
    whole, every tensor over it a view with its own shape, strides and
    offset (a view beside its base shares its storage when loaded; a slice
    alone brings its whole storage); a conjugate or negative view is saved
    resolved, in a storage of its own; a tensor reachable under several
    names with the same memory and view (tied weights) is saved once.
    Modules are audited first (ckpt.audit): state the file will not hold
    (plain tensor attributes, non-persistent buffers) and surprises
    (different parameters sharing memory, mixed dtypes) are reported with
    one ckpt.AuditWarning; a tied parameter (one Parameter under several
    names, as a tied embedding and head) is not, since load_state_dict
    restores it. Returns the list of findings, ties included. Raises ckpt.UnsupportedError for other
    objects (named by their place in obj), ckpt.FileError on I/O errors."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise errors.InvalidArgumentError(
            "no format for the extension %r (use .safetensors, .pt, .pth, .bin or .ckpt)"
            % ext, path)
    return _save_as(obj, path, FORMATS[ext], meta, stacklevel=3, record_source=record_source)


def _meta_strings(meta, path):
    """meta as str to str: other values as JSON text, their keys listed
    under "ckpt.meta_json"."""
    out, encoded = {}, []
    for k, v in (meta or {}).items():
        if not isinstance(k, str):
            raise errors.InvalidArgumentError("metadata keys must be str", path)
        if k.startswith("ckpt."):
            raise errors.InvalidArgumentError(
                "metadata key %r: keys starting with 'ckpt.' are reserved for ckpt" % k, path)
        if not isinstance(v, str):
            try:
                v = json.dumps(v, allow_nan=False, sort_keys=True)
            except (TypeError, ValueError) as e:
                raise errors.InvalidArgumentError(
                    "metadata %r: a str or a JSON-encodable value expected (%s)" % (k, e),
                    path) from None
            encoded.append(k)
        out[k] = v
    if encoded:
        out["ckpt.meta_json"] = json.dumps(encoded)
    return out


def _prepare(obj, path, meta, stacklevel, label=None, snapshot=None, record_source=True):
    """The tree of obj and the write options of save(); the caller frees
    the builder (b.free()) once the tree is written. snapshot: see
    _Builder; record_source: see save()."""
    meta = _meta_strings(meta, path)
    b = _Builder(path, snapshot)
    try:
        root = b.value(obj)
        if b.optimizers:
            meta["ckpt.optimizers"] = json.dumps(b.optimizers, sort_keys=True)
        saved = _saved_with(b, record_source)
        listed = json.loads(meta.get("ckpt.meta_json", "[]")) + sorted(saved)
        meta.update((k, json.dumps(v, sort_keys=True)) for k, v in saved.items())
        meta["ckpt.meta_json"] = json.dumps(listed)
        keys = [k.encode() for k in meta]
        vals = [v.encode() for v in meta.values()]
        opts = options(WriteOptions_)
        opts.meta_keys = (c_char_p * max(1, len(keys)))(*keys)
        opts.meta_values = (c_char_p * max(1, len(vals)))(*vals)
        opts.nmeta = len(keys)
        # a tie the loader restores (a tied embedding and head, every such
        # LLM) is returned, not warned about: only what a reload loses
        risks = [f for f in b.findings if f.kind != "tied-parameters"]
        if risks:
            warnings.warn(AuditWarning(
                "%s: %d finding(s):\n  %s" % (
                    label or "ckpt.save " + str(path), len(risks), "\n  ".join(f.message for f in risks))),
                stacklevel=stacklevel + 1)
        return b, root, opts
    except BaseException:
        b.free()
        raise


def _save_as(obj, path, fmt, meta, stacklevel, label=None, record_source=True):
    """save() with the format given (1 safetensors, 3 torch zip). label
    names the save in the audit warning (default: path); a stable label
    lets Python's warning filter show a repeated warning once."""
    b, root, opts = _prepare(obj, path, meta, stacklevel + 1, label, record_source=record_source)
    try:
        check(lib.ckpt_tree_write(root, os.fsencode(path), fmt, ctypes.byref(opts)), path)
        return b.findings
    finally:
        b.free()
