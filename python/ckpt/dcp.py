"""ckpt.dcp: a torch.distributed.checkpoint StorageWriter / StorageReader
pair (torch 2.13 API) that makes a DCP checkpoint durable and checked:

    dcp.save(state_dict, storage_writer=ckpt.dcp.Writer(path))
    dcp.load(state_dict, storage_reader=ckpt.dcp.Reader(path))

Layout (a DCP directory, FORMATS.md section 4, in DCP's safetensors data
format): `.metadata` is DCP's pickled Metadata, holding only DCP's own
classes; its storage_data maps every MetadataIndex to a _StorageInfo
(relative_path, offset, length). Each rank writes "__RANK_N.distcp" (N
counts from 0; a second file only when a rank holds two chunks of one
tensor), a complete safetensors file written by ckpt's writer through the
atomic commit (temporary file, fsync, rename, fsync of the directory):
tensor names are the fqns, __metadata__ has DCP_SHARDING_INFO,
DCP_VERSION and format as DCP's safetensors format writes them, and
"ckpt.xxh3" the XXH3-64 digest of every tensor. A bytes item (non-tensor
state, torch.save'd by DCP's planner) is a U8 tensor named by its fqn.
[offset, offset + length) is exactly one tensor's data (for a bytes item,
the torch.save bytes), so a reader needs either the storage_data or the
safetensors header, never both.

Commit: every rank writes its file, drops it from the page cache and
verifies it from disk (ckpt_verify: sizes and digests) before it reports
its WriteResults; DCP gathers them on the coordinator, and finish() -- only
called when every rank succeeded -- checks that every chunk of the
metadata has storage in a file whose header agrees, then writes
`.metadata` atomically. A directory without `.metadata` is no checkpoint.

Reader: `.metadata` is unpickled with an allowlist of DCP's metadata
classes (anything else is refused as ckpt.UnsafeError; DCP's own reader
would run it). Every chunk is read whole and its digest checked before any
part of it is used, also when resharding needs only part of it."""
import dataclasses
import io
import json
import os
import pickle
import re
import signal
import struct
import uuid

from . import errors
from ._lib import lib

_METADATA = ".metadata"
_SUFFIX = ".distcp"
_DATA_NAME = re.compile(r"^__\d+_\d+\.distcp$")
# safetensors' own bound on the header
_MAX_HEADER = 100 << 20


def _crash_point(name):
    """Test hook: SIGKILL this process at the named point when
    CKPT_TEST_CRASH_AT names it (and CKPT_TEST_CRASH_RANK, when set, is
    this rank). Used by the crash tests only."""
    if os.environ.get("CKPT_TEST_CRASH_AT") != name:
        return
    want = os.environ.get("CKPT_TEST_CRASH_RANK")
    if want is not None:
        import torch.distributed as dist
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if int(want) != rank:
            return
    os.kill(os.getpid(), signal.SIGKILL)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _makedirs(path):
    """mkdir -p, each new directory made durable in its parent."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    _makedirs(parent)
    try:
        os.mkdir(path)
    except FileExistsError:
        return
    _fsync_dir(parent)


def _write_atomic(path, data):
    """data into path: a temporary file named as ckpt's atomic commit names
    them (so `ckpt store gc` removes a killed writer's), fsync, rename,
    fsync of the directory."""
    d, base = os.path.split(path)
    tmp = os.path.join(d, ".%s.tmp-%d-%016x" % (base.lstrip("."), os.getpid(),
                                                 int.from_bytes(os.urandom(8), "little")))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.rename(tmp, path)
    _fsync_dir(d or ".")


def _header(path, fd=None):
    """(tensors, digests, data_start, size) of a safetensors file: tensors
    {name: (dtype, shape, begin, end)} with absolute offsets, digests
    {name: int} from "ckpt.xxh3"."""
    own = fd is None
    if own:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, 8, 0)
        if len(head) < 8:
            raise errors.TruncatedError("not a safetensors file: %d bytes" % size, path, "", 0)
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER or 8 + n > size:
            raise errors.TruncatedError("safetensors header of %d bytes does not fit in the "
                                        "file of %d bytes" % (n, size), path, "", 0)
        raw = os.pread(fd, n, 8)
    finally:
        if own:
            os.close(fd)
    try:
        hdr = json.loads(raw)
    except ValueError as e:
        raise errors.FormatError("safetensors header is not JSON: %s" % e, path, "", 8) from None
    meta = hdr.pop("__metadata__", None) or {}
    try:
        digests = {k: int(v, 16) for k, v in json.loads(meta.get("ckpt.xxh3", "{}")).items()}
    except (ValueError, TypeError, AttributeError):
        raise errors.FormatError("metadata ckpt.xxh3 is not a digest table", path) from None
    start = 8 + n
    tensors = {}
    for k, v in hdr.items():
        try:
            b, e = v["data_offsets"]
            tensors[k] = (v["dtype"], [int(x) for x in v["shape"]], start + int(b), start + int(e))
        except (KeyError, TypeError, ValueError):
            raise errors.FormatError("safetensors entry %r is malformed" % k, path, k, 8) from None
        if not start <= tensors[k][2] <= tensors[k][3] <= size:
            raise errors.TruncatedError("tensor %r ends at byte %d, past the end of the file "
                                        "(%d bytes)" % (k, tensors[k][3], size), path, k,
                                        tensors[k][2])
    return tensors, digests, start, size


def _digest(buf):
    """XXH3-64 of a uint8 tensor's bytes."""
    return lib.ckpt_xxh3_64(buf.data_ptr() if buf.numel() else None, buf.numel())


def _read_exact(fd, n, off, path, what):
    """n bytes at off into a new uint8 tensor (not zero-filled first)."""
    import torch
    buf = torch.empty(n, dtype=torch.uint8)
    view, got = memoryview(buf.numpy()).cast("B"), 0
    while got < n:
        r = os.preadv(fd, [view[got:]], off + got)
        if r == 0:
            raise errors.TruncatedError("%s: %d bytes at offset %d expected, the file ends "
                                        "after %d" % (what, n, off, got), path, what, off + got)
        got += r
    return buf


def _entry_for(tensors, info, path):
    """The header entry whose data is exactly [offset, offset + length)."""
    for name, (dtype, shape, b, e) in tensors.items():
        if b == info.offset and e - b == info.length:
            return name, dtype, shape
    raise errors.MismatchError(
        "no tensor's data is at [%d, %d) as .metadata says" % (info.offset,
                                                               info.offset + info.length),
        path, "", info.offset)


# ------------------------------------------------------------ metadata


_META_MOD = "torch.distributed.checkpoint.metadata"
_ALLOWED = {
    (_META_MOD, n) for n in ("Metadata", "TensorStorageMetadata", "ChunkStorageMetadata",
                             "BytesStorageMetadata", "TensorProperties",
                             "_MEM_FORMAT_ENCODING", "MetadataIndex", "StorageMeta")
} | {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
     # a layout by name from torch's own table (TensorProperties' layout)
     ("torch.serialization", "_get_layout"),
     ("collections", "OrderedDict"), ("pathlib", "PosixPath"),
     ("pathlib._local", "PosixPath")}


class _MetadataUnpickler(pickle.Unpickler):
    """pickle.load restricted to DCP's metadata classes, torch.Size and
    torch's dtypes and layouts."""

    def __init__(self, f, path):
        super().__init__(f)
        self.path = path

    def find_class(self, module, name):
        import torch
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None),
                                            (torch.dtype, torch.layout)):
            return getattr(torch, name)
        raise errors.UnsafeError("%s would import %s.%s, which is not one of DCP's metadata "
                                 "classes; refused" % (_METADATA, module, name), self.path,
                                 _METADATA)


def read_metadata(path):
    """The Metadata of the DCP directory `path`, unpickled with the
    allowlist of DCP's classes (ckpt.UnsafeError for anything else);
    ckpt.NotFoundError when there is no `.metadata`."""
    mpath = os.path.join(os.fspath(path), _METADATA)
    try:
        with open(mpath, "rb") as f:
            md = _MetadataUnpickler(f, mpath).load()
    except FileNotFoundError:
        raise errors.NotFoundError("no %s: not a complete DCP checkpoint" % _METADATA,
                                   os.fspath(path)) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise errors.FormatError("%s cannot be read: %s" % (_METADATA, e), mpath) from None
    from torch.distributed.checkpoint.metadata import Metadata
    if not isinstance(md, Metadata) or not isinstance(md.storage_data, dict):
        raise errors.FormatError("%s holds no DCP Metadata with storage_data" % _METADATA, mpath)
    return md


def _check_layout(path, md, headers):
    """Every chunk of md has storage in a file whose header has a tensor at
    exactly that range; headers: {relative_path: _header(...)}."""
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
    for fqn, m in md.state_dict_metadata.items():
        idxs = ([MetadataIndex(fqn, c.offsets) for c in m.chunks]
                if isinstance(m, TensorStorageMetadata) else [MetadataIndex(fqn)])
        for idx in idxs:
            info = md.storage_data.get(idx)
            if info is None:
                raise errors.MismatchError("%s: chunk %s of %r has no storage" % (
                    _METADATA, list(idx.offset or ()), fqn), path, fqn)
            rel = info.relative_path
            if not _DATA_NAME.match(rel):
                raise errors.FormatError("%s names the data file %r, not one of ckpt.dcp's" % (
                    _METADATA, rel), path, fqn)
            if rel not in headers:
                p = os.path.join(path, rel)
                if not os.path.exists(p):
                    raise errors.MismatchError("%s names %s, which is missing" % (
                        _METADATA, rel), p, fqn)
                headers[rel] = _header(p)
            tensors, digests, _, _ = headers[rel]
            name, _, _ = _entry_for(tensors, info, os.path.join(path, rel))
            if name not in digests:
                raise errors.ChecksumError("tensor %r has no ckpt.xxh3 digest" % name,
                                           os.path.join(path, rel), name)


# ------------------------------------------------------------ writer


def _writer_base():
    from torch.distributed.checkpoint.storage import StorageWriter
    return StorageWriter


def _reader_base():
    from torch.distributed.checkpoint.storage import StorageReader
    return StorageReader


class Writer(_writer_base()):
    """StorageWriter into the directory `path` (created, durably). With
    overwrite=False an existing `.metadata` is refused; with True (DCP's
    default) the coordinator removes it before any rank writes, so an
    interrupted overwrite leaves no checkpoint rather than a mixed one."""

    def __init__(self, path, *, overwrite=True):
        super().__init__()
        self.path = os.fspath(path)
        self.overwrite = overwrite
        self.save_id = str(uuid.uuid4())
        self.is_coordinator, self.rank = True, 0

    def reset(self, checkpoint_id=None):
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.save_id = str(uuid.uuid4())

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank") or 0
        if kwargs.get("use_collectives", True) is False:
            raise errors.UnsupportedError(
                "ckpt.dcp.Writer commits .metadata on the coordinator once every rank "
                "verified its files: it needs use_collectives=True", self.path)

    def storage_meta(self):
        from torch.distributed.checkpoint.metadata import StorageMeta
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    def prepare_local_plan(self, plan):
        _makedirs(self.path)
        return plan

    def prepare_global_plan(self, plans):
        mpath = os.path.join(self.path, _METADATA)
        if os.path.exists(mpath):
            if not self.overwrite:
                raise errors.InvalidArgumentError(
                    "a checkpoint is already there (overwrite=False)", self.path)
            os.unlink(mpath)
            _fsync_dir(self.path)
        return [dataclasses.replace(p, storage_data="__%d_" % i) for i, p in enumerate(plans)]

    def write_data(self, plan, planner):
        import torch
        from torch.distributed.checkpoint.planner import WriteItemType
        from torch.futures import Future
        files = []  # [(tensors {fqn: tensor}, items)]; one chunk per fqn per file
        seen = set()
        for item in plan.items:
            data = planner.resolve_data(item)
            if item.type == WriteItemType.BYTE_IO:
                t = torch.frombuffer(bytearray(data.getbuffer()), dtype=torch.uint8) \
                    if data.getbuffer().nbytes else torch.empty(0, dtype=torch.uint8)
            else:
                t = data.detach().cpu()
                key = (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype)
                if t.data_ptr() and key in seen:
                    t = t.clone()  # ckpt's writer saves one memory once: keep both names
                seen.add(key)
            fqn = item.index.fqn
            for tensors, items in files:
                if fqn not in tensors:
                    break
            else:
                files.append(({}, []))
                tensors, items = files[-1]
            tensors[fqn] = t
            items.append(item)
        results = []
        for n, (tensors, items) in enumerate(files):
            results.extend(self._write_file("%s%d%s" % (plan.storage_data, n, _SUFFIX),
                                            tensors, items))
        fut = Future()
        fut.set_result(results)
        return fut

    def _write_file(self, name, tensors, items):
        from torch.distributed.checkpoint.filesystem import _StorageInfo
        from torch.distributed.checkpoint.planner import WriteItemType
        from torch.distributed.checkpoint.storage import WriteResult
        from ._save import _save_as
        path = os.path.join(self.path, name)
        sharding = {it.index.fqn: {"saved_offsets": list(it.tensor_data.chunk.offsets)}
                    for it in items if it.type != WriteItemType.BYTE_IO}
        meta = {"DCP_SHARDING_INFO": json.dumps(sharding), "DCP_VERSION": "1.0", "format": "pt"}
        _crash_point("before-write")
        _save_as(tensors, path, 1, meta, stacklevel=4)
        _crash_point("after-write")
        verify_file(path)
        _crash_point("after-verify")
        hdr, _, _, _ = _header(path)
        out = []
        for it in items:
            _, _, b, e = hdr[it.index.fqn]
            out.append(WriteResult(index=it.index, size_in_bytes=e - b,
                                   storage_data=_StorageInfo(name, b, e - b)))
        return out

    def finish(self, metadata, results):
        from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
        metadata.version = CURRENT_DCP_VERSION
        metadata.storage_data = {wr.index: wr.storage_data for rs in results for wr in rs}
        metadata.storage_meta = self.storage_meta()
        headers = {}
        _check_layout(self.path, metadata, headers)
        # data files of an earlier save into this directory (more ranks)
        for f in os.listdir(self.path):
            if _DATA_NAME.match(f) and f not in headers:
                os.unlink(os.path.join(self.path, f))
        _crash_point("before-metadata")
        _write_atomic(os.path.join(self.path, _METADATA), pickle.dumps(metadata))
        _crash_point("after-metadata")

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return isinstance(checkpoint_id, (str, os.PathLike))


def verify_file(path):
    """One data file re-read from disk (its pages dropped from the page
    cache first, best effort) and fully verified: sizes and digests."""
    from ._scan import verify
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    rep = verify(path)
    if not rep.ok:
        raise rep.error
    _, digests, _, _ = _header(path)
    if not digests:
        raise errors.ChecksumError("no ckpt.xxh3 digests", path)


# ------------------------------------------------------------ reader


class Reader(_reader_base()):
    """StorageReader of a directory written by ckpt.dcp.Writer. Every chunk
    a load needs is read whole and its XXH3 digest checked before any of it
    is copied (ckpt.ChecksumError naming file, tensor and offset)."""

    def __init__(self, path):
        super().__init__()
        self.path = os.fspath(path)
        self.storage_data = {}
        self.load_id = str(uuid.uuid4())

    def reset(self, checkpoint_id=None):
        self.storage_data = {}
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.load_id = str(uuid.uuid4())

    def read_metadata(self, *args, **kwargs):
        from torch.distributed.checkpoint.metadata import StorageMeta
        md = read_metadata(self.path)
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = self.load_id
        return md

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        from torch.futures import Future
        per_file = {}
        for req in plan.items:
            per_file.setdefault(self.storage_data[req.storage_index].relative_path,
                                []).append(req)
        for rel, reqs in per_file.items():
            self._read_file(rel, reqs, planner)
        fut = Future()
        fut.set_result(None)
        return fut

    def _read_file(self, rel, reqs, planner):
        import torch
        from torch.distributed._shard._utils import narrow_tensor_by_index
        from torch.distributed.checkpoint.planner import LoadItemType
        from ._load import _TORCH_DTYPES
        if not _DATA_NAME.match(rel):
            raise errors.FormatError("%s names the data file %r, not one of ckpt.dcp's" % (
                _METADATA, rel), self.path)
        path = os.path.join(self.path, rel)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise errors.MismatchError("%s names %s, which is missing" % (_METADATA, rel),
                                       path) from None
        try:
            tensors, digests, _, _ = _header(path, fd)
            chunks = {}  # offset -> (name, dtype, shape, verified bytes)
            for req in reqs:
                info = self.storage_data[req.storage_index]
                if info.offset not in chunks:
                    name, dtype, shape = _entry_for(tensors, info, path)
                    buf = _read_exact(fd, info.length, info.offset, path, name)
                    want = digests.get(name)
                    if want is None:
                        raise errors.ChecksumError("tensor %r has no ckpt.xxh3 digest" % name,
                                                   path, name, info.offset)
                    got = _digest(buf)
                    if got != want:
                        raise errors.ChecksumError(
                            "XXH3 of tensor %r is %016x, ckpt.xxh3 says %016x" % (
                                name, got, want), path, name, info.offset)
                    chunks[info.offset] = (name, dtype, shape, buf)
                name, dtype, shape, buf = chunks[info.offset]
                if req.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(req, io.BytesIO(buf.numpy().tobytes()))
                    continue
                tdt = getattr(torch, _TORCH_DTYPES.get(dtype, ""), None)
                if tdt is None:
                    raise errors.UnsupportedError("dtype %s of %r" % (dtype, name), path, name)
                numel = 1
                for x in shape:
                    numel *= x
                if numel * tdt.itemsize != len(buf):
                    raise errors.FormatError("tensor %r: %d bytes for shape %s of %s" % (
                        name, len(buf), shape, dtype), path, name, info.offset)
                t = buf.view(tdt).reshape(shape)
                t = narrow_tensor_by_index(t, req.storage_offsets, req.lengths)
                target = planner.resolve_tensor(req).detach()
                if target.size() != t.size():
                    raise errors.MismatchError("%s: chunk of %s, target %s" % (
                        name, list(t.size()), list(target.size())), path, name, info.offset)
                target.copy_(t)
                planner.commit_tensor(req, target)
        finally:
            os.close(fd)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return isinstance(checkpoint_id, (str, os.PathLike))


# ------------------------------------------------------------ whole


def verify(path):
    """Full check of a DCP directory written by ckpt.dcp.Writer: the
    restricted `.metadata`, every chunk's storage in a file whose header
    agrees, every data file verified (sizes, digests), and no data file
    that `.metadata` does not name. Returns a ckpt.VerifyReport (format
    "dcp"); a problem gives ok=False with `error` set."""
    from ._scan import VerifyReport
    path = os.fspath(path)
    ntensors = nbytes = 0
    try:
        md = read_metadata(path)
        headers = {}
        _check_layout(path, md, headers)
        for f in sorted(os.listdir(path)):
            if f.endswith(_SUFFIX) and f not in headers:
                raise errors.MismatchError("%s is not named by %s" % (f, _METADATA),
                                           os.path.join(path, f))
        from ._scan import verify as verify_one
        for rel in sorted(headers):
            rep = verify_one(os.path.join(path, rel))
            if not rep.ok:
                raise rep.error
            ntensors += rep.tensors
            nbytes += rep.bytes
    except errors.Error as e:
        if isinstance(e, (errors.FileError, errors.OutOfMemoryError)) and \
                not isinstance(e, errors.NotFoundError):
            raise
        return VerifyReport(path, False, "dcp", ntensors, nbytes, 0, e)
    return VerifyReport(path, True, "dcp", ntensors, nbytes, 0)


def load(path):
    """The whole state dict of a DCP directory written by Writer, in this
    process (no process group needed), as DCP's dcp_to_torch_save builds
    it: every tensor assembled from its chunks, non-tensor items unpickled
    by DCP's planner, nested dicts restored."""
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    sd = {}
    _load_state_dict(sd, storage_reader=Reader(path), planner=_EmptyStateDictLoadPlanner(),
                     no_dist=True)
    return sd


__all__ = ["Writer", "Reader", "verify", "load", "read_metadata"]
