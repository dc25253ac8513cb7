"""ckpt.open: lazy access to one checkpoint, with the habits of
safetensors' safe_open (keys, get_tensor, get_slice, metadata, a context
manager), for every format libckpt reads. Only the structure is read when
the file is opened; tensor bytes are read when asked for."""
import os

from . import errors
from ._lib import lib, text
from ._load import _Converter, _Source, _file_metadata


class _Slice:
    """One tensor, not read yet: get_shape(), get_dtype(), and [...]
    (basic indexing) to read part of it."""

    def __init__(self, handle, name, t):
        self._h, self._name, self._t = handle, name, t

    def get_shape(self):
        return [lib.ckpt_tensor_shape(self._t)[i] for i in range(lib.ckpt_tensor_ndim(self._t))]

    def get_dtype(self):
        """The dtype's safetensors name ("F32", "BF16"...)."""
        return text(lib.ckpt_dtype_name(lib.ckpt_tensor_dtype(self._t)))

    def __getitem__(self, index):
        # a contiguous tensor comes back as a view of the file's private
        # mapping: indexing it and copying the result touches only the
        # pages the slice covers
        return self._h._place(self._h._tensor(self._t)[index])


class SafeOpen:
    """What ckpt.open returns; see there."""

    def __init__(self, path, framework="pt", device="cpu"):
        if framework not in ("pt", "torch", "pytorch"):
            raise errors.InvalidArgumentError(
                "framework %r: ckpt.open gives torch tensors (\"pt\")" % (framework,),
                os.fspath(path))
        if device != "cpu":  # torch is imported by the first tensor only
            from ._load import check_device
            device = check_device(device, "device", path)
        self._device = device
        # never scans: nothing here executes anything. Mapped privately, so
        # a slice reads only the pages it covers; every tensor handed out is
        # a copy, so none depends on the file afterwards.
        self._src = _Source(path, mmap=True)
        self._conv = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Releases the file; tensors already returned stay valid."""
        self._src.close()

    def _handle(self):
        if not self._src.handle:
            raise errors.InvalidArgumentError("the file is closed", self._src.path)
        return self._src.handle

    def _find(self, name):
        t = lib.ckpt_file_find_tensor(self._handle(), name.encode("utf-8", "surrogateescape"))
        if not t:
            raise KeyError(name)
        return t

    def _tensor(self, t):
        if self._conv is None:
            self._conv = _Converter(self._src, load_types=False, plan=False)
        return self._conv.tensor_of(t)

    def _place(self, x):
        """A private copy of x on the requested device (RawTensor: as is)."""
        if not hasattr(x, "clone"):
            return x
        return x.clone() if str(self._device) == "cpu" else x.to(self._device, copy=True)

    def keys(self):
        """Every tensor's flattened name ("model.layers.0.weight"), in the
        file's sorted order."""
        h = self._handle()
        return [text(lib.ckpt_tensor_name(lib.ckpt_file_tensor(h, i)))
                for i in range(lib.ckpt_file_tensor_count(h))]

    def get_tensor(self, name):
        """The whole tensor `name` (KeyError when there is none), a copy in
        private memory."""
        return self._place(self._tensor(self._find(name)))

    def get_slice(self, name):
        """The tensor `name` unread: index it (f.get_slice("w")[0:2, :]) to
        read part of it."""
        return _Slice(self, name, self._find(name))

    def metadata(self):
        """The file's metadata as a dict of str to str, None when it has
        none (as ckpt.metadata and `ckpt inspect` give it). For a sharded
        set (its index, or a folder holding one) that is the index's
        "metadata" (transformers' sharded_metadata: "total_size" and what
        the writer added), values that are not str as compact JSON text
        ("2704", '{"a":[1,2]}'); each shard's own __metadata__ (save_pretrained's
        {"format": "pt"}) belongs to that file: open the shard for it."""
        h = self._handle()
        return _file_metadata(h) if lib.ckpt_file_has_metadata(h) else None

    def format(self):
        """"safetensors", "torch-zip", "torch-legacy", "pickle"..."""
        return text(lib.ckpt_format_name(lib.ckpt_file_format(self._handle())))


def open(path, framework="pt", device="cpu"):  # noqa: A001 (safe_open's habit)
    """Opens the checkpoint at `path` (any format ckpt reads: safetensors,
    a sharded index, torch zip or legacy files, pickles) lazily, as
    safetensors.safe_open does:

        with ckpt.open("model.pt") as f:
            for name in f.keys():
                w = f.get_tensor(name)
            head = f.get_slice("embed.weight")[:10]
            meta = f.metadata()

    Only the structure is read at open; nothing in the file is ever
    executed, so this is safe on any file (ckpt.scan says whether torch.load
    would be). Raises ckpt.Error subclasses. The file is read through a
    private mapping (as ckpt.load(mmap=True) does): it must not shrink
    while it is open (SIGBUS); the tensors handed out are copies."""
    return SafeOpen(errors.path_arg(path, "ckpt.open"), framework, device)


__all__ = ["open", "SafeOpen"]
