"""ckpt.convert: ckpt_convert (the library's `ckpt convert`) from Python."""
import ctypes
import os
from typing import NamedTuple

from ._lib import ConvertOptions_, ConvertReport_, check, fspath, lib, options, text

# ckpt_format values the writer takes (include/ckpt/file.h)
_FORMATS = {"safetensors": 1, "torch": 3, "dcp": 7}


class ConvertReport(NamedTuple):
    """What ckpt.convert wrote: format ("safetensors", "torch-zip", "dcp"),
    tensors (safetensors records, torch storages, DCP tensor items), bytes
    (the output's size), keys (tensor names; DCP: items), shards (files of
    a sharded set, 0 for one file or a DCP directory)."""
    format: str
    tensors: int
    bytes: int
    keys: int
    shards: int


def _strings(values):
    arr = (ctypes.c_char_p * max(len(values), 1))(*[v.encode() for v in values])
    return arr, len(values)


def convert(src, dst, *, format=None, select=(), exclude=(), max_shard_size=0):  # noqa: A002
    """Converts checkpoint `src` (any format ckpt reads) into `dst`,
    atomically and verified, as `ckpt convert` does: format "safetensors",
    "torch" or "dcp" (a torch.distributed.checkpoint directory, written as
    dcp.save does on one rank; `dst` must not exist or be empty), or None
    to take it from dst's name (.safetensors; .pt .pth .bin .ckpt; .dcp).
    select: name prefixes to keep (one naming a dict or list, such as a
    training checkpoint's "model", writes it with its own keys, as
    torch.load(src)["model"] has them); exclude: globs to leave out;
    max_shard_size > 0: a Hugging Face sharded set. A model folder `src`
    converted into a folder `dst` ("out/", or an existing directory)
    takes its other files along (config.json, the tokenizer's...: not the
    weights, hidden files, subfolders or training state such as
    optimizer.pt and trainer_state.json), so that from_pretrained(dst)
    loads, and weights of another layout already in a folder `dst` are
    removed, so that it holds one set of weights; a symbolic link leading
    out of `src` is refused (InvalidArgumentError) before anything is
    written, except a Hugging Face cache snapshot's links to its blobs.
    Returns a ConvertReport; raises ckpt.Error subclasses
    (InvalidArgumentError, UnsupportedError naming what cannot be written,
    FileError...)."""
    src, dst = os.fspath(src), os.fspath(dst)
    o = options(ConvertOptions_)
    if format is not None:
        if format not in _FORMATS:
            raise ValueError("format is one of %s, not %r" % (", ".join(_FORMATS), format))
        o.format = _FORMATS[format]
    sel, o.nselect = _strings(list(select))
    exc, o.nexclude = _strings(list(exclude))
    o.select = ctypes.cast(sel, ctypes.POINTER(ctypes.c_char_p))
    o.exclude = ctypes.cast(exc, ctypes.POINTER(ctypes.c_char_p))
    o.max_shard_size = max_shard_size
    r = ConvertReport_()
    check(lib.ckpt_convert(ctypes.byref(r), fspath(src), fspath(dst), ctypes.byref(o)), src)
    return ConvertReport(text(lib.ckpt_format_name(r.format)), r.tensors, r.bytes, r.keys,
                         r.shards)
