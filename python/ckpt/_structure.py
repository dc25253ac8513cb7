"""The original tree of a safetensors file written by ckpt: its metadata
"ckpt.structure" records nesting, non-tensor values, shared nodes, dtypes
safetensors lacks and views of one storage (format: include/ckpt.h,
"write"). Rebuilt here from plain JSON data; nothing is executed."""
import json
import struct

from . import errors


class _Rebuilder:
    def __init__(self, flat, storages, path):
        import torch
        self.torch, self.flat, self.storages, self.path = torch, flat, storages, path
        self.nodes = []      # lists, tuples, sets, dicts, tensors in document order
        self.bases = {}      # storage group -> tensor over the whole storage

    def fail(self, what):
        return errors.FormatError("ckpt.structure: %s" % what, self.path, "__metadata__")

    def value(self, v):
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if not isinstance(v, dict) or not v:
            raise self.fail("expected a value, got %r" % (v,))
        if "tensor" in v:
            return self.tensor(v)
        if len(v) != 1:
            raise self.fail("a tagged value has one key, got %s" % sorted(v))
        (tag, arg), = v.items()
        if tag == "int" and isinstance(arg, str):
            return int(arg)
        if tag == "float" and isinstance(arg, str) and len(arg) == 16:
            return struct.unpack(">d", bytes.fromhex(arg))[0]
        if tag == "bytes" and isinstance(arg, str):
            return bytes.fromhex(arg)
        if tag == "dtype" and isinstance(arg, str):
            dt = getattr(self.torch, arg, None)
            if not isinstance(dt, self.torch.dtype):
                raise self.fail("unknown torch dtype %r" % arg)
            return dt
        if tag == "ref" and isinstance(arg, int) and not isinstance(arg, bool):
            if not 0 <= arg < len(self.nodes) or self.nodes[arg] is None:
                raise self.fail("ref %d names no earlier node" % arg)
            return self.nodes[arg]
        if tag in ("list", "tuple", "set", "dict") and isinstance(arg, list):
            return self.container(tag, arg)
        raise self.fail("unknown tag %r" % tag)

    def container(self, tag, items):
        idx = len(self.nodes)
        self.nodes.append(None)  # numbered where it first appears
        if tag == "list":
            out = self.nodes[idx] = []
            out.extend(self.value(x) for x in items)
        elif tag == "dict":
            out = self.nodes[idx] = {}
            for kv in items:
                if not isinstance(kv, list) or len(kv) != 2:
                    raise self.fail("dict items are [key, value] pairs")
                try:
                    out[self.value(kv[0])] = self.value(kv[1])
                except TypeError:
                    raise self.fail("unhashable dict key") from None
        else:
            vals = [self.value(x) for x in items]
            try:
                out = tuple(vals) if tag == "tuple" else set(vals)
            except TypeError:
                raise self.fail("unhashable set element") from None
            self.nodes[idx] = out
        return out

    def tensor(self, v):
        name = v["tensor"]
        t = self.flat.get(name) if isinstance(name, str) else None
        if t is None:
            raise self.fail("no stored tensor %r" % (name,))
        idx = len(self.nodes)
        self.nodes.append(None)
        dt = v.get("dtype")
        if dt is not None:
            t = self.logical(t, dt)
        if "storage" in v and dt is None:
            t = self.place(t, v)
        self.nodes[idx] = t
        return t

    def logical(self, t, dt):
        """C128/C32 are stored as F64/F16 with a trailing dimension of 2."""
        torch = self.torch
        want = {"C128": torch.complex128, "C64": torch.complex64,
                "C32": getattr(torch, "complex32", None)}.get(dt)
        if want is None or not isinstance(t, torch.Tensor) or not t.ndim or t.shape[-1] != 2:
            raise self.fail("cannot read a stored tensor as %r" % (dt,))
        try:
            return torch.view_as_complex(t)
        except RuntimeError:  # an unaligned or half view: copy
            return torch.view_as_complex(t.contiguous().clone())

    def place(self, t, v):
        """A view of storage group G at element offset O with strides: shares
        memory with the other views of G, as in the file that was converted."""
        torch = self.torch
        g, off, stride = v.get("storage"), v.get("offset"), v.get("stride")
        if not (isinstance(g, int) and 0 <= g < len(self.storages) and isinstance(off, int)
                and isinstance(stride, list) and len(stride) == t.ndim):
            raise self.fail("bad storage placement of %r" % v["tensor"])
        if g not in self.bases:
            spec = self.storages[g]
            full = self.flat.get(spec.get("data")) if isinstance(spec, dict) else None
            nbytes = spec.get("nbytes") if isinstance(spec, dict) else None
            if full is not None and full.dtype == t.dtype:
                self.bases[g] = (full, False)
            elif isinstance(nbytes, int) and nbytes >= 0:
                # no stored tensor covers it: rebuilt, filled view by view
                self.bases[g] = (torch.zeros(nbytes // t.element_size(), dtype=t.dtype), True)
            else:
                raise self.fail("storage %d has neither data nor size" % g)
        base, fill = self.bases[g]
        if base.dtype != t.dtype:
            return t  # one storage seen through two dtypes: keep the copy
        try:
            view = base.as_strided(t.shape, stride, base.storage_offset() + off)
        except RuntimeError:
            raise self.fail("view of %r outside its storage" % v["tensor"]) from None
        if fill:
            view.copy_(t)
        return view


def rebuild(text, flat, path):
    """The tree recorded in `text` (the "ckpt.structure" metadata value),
    its tensors taken from `flat` (stored name -> tensor)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise errors.FormatError("ckpt.structure is not JSON: %s" % exc, path,
                                 "__metadata__") from None
    if not isinstance(doc, dict) or doc.get("version") != 1 or "root" not in doc:
        raise errors.FormatError("ckpt.structure: expected version 1 with a root", path,
                                 "__metadata__")
    storages = doc.get("storages") or []
    if not isinstance(storages, list):
        raise errors.FormatError("ckpt.structure: storages is not a list", path, "__metadata__")
    try:
        return _Rebuilder(flat, storages, path).value(doc["root"])
    except RecursionError:
        raise errors.FormatError("ckpt.structure nests too deeply", path, "__metadata__") from None
