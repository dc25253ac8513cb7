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

Commit: every rank writes its file (tensor bytes written from the
tensor's memory, XXH3 taken on the way), fsyncs it, drops it from the page
cache and verifies it from disk (ckpt_verify: sizes and digests) before it
reports its WriteResults. The page cache: after the fsync the file's pages
are clean, and POSIX_FADV_DONTNEED drops clean pages that no one maps, so
the verifying read comes from the block device rather than from the
copies the write left in memory (best effort: pages another process maps
stay, and a virtual disk may be served from the host's cache). DCP
gathers the results on the coordinator, and finish() -- only called when
every rank succeeded -- checks that every chunk of the metadata has
storage in a file whose header agrees, then writes `.metadata`
atomically. A directory without `.metadata` is no checkpoint.

Reader: `.metadata` is unpickled with an allowlist of DCP's metadata
classes (anything else is refused as ckpt.UnsafeError; DCP's own reader
would run it). Every chunk is read whole and its digest checked before any
part of it is used, also when resharding needs only part of it. A chunk
that one request takes whole into a contiguous CPU tensor of its dtype
(a plain load, or resharding by rows) is read with one pread straight into
that tensor and its digest taken over the same memory; the tensor is
committed to the planner only when the digest matches (on a mismatch the
load raises and the target holds the unverified bytes). Other chunks go
through one scratch buffer per file.

Writer(path, serialization="torch_save") writes DCP's own layout instead
(torch.save slices, which plain dcp.load reads): see Writer."""
import ctypes
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
from ._lib import check, fspath, lib

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
    """data (a buffer, or a function that writes the file's bytes through
    the function it is given, which takes a buffer) into path through
    libckpt's atomic writer (ckpt_atomic_file_*: the one rule for every
    file ckpt writes: a locked temporary file named for `ckpt store gc`,
    every byte read back, fsync, rename, fsync of the directory, dead
    writers' temporary files of the target reaped; on any failure the
    temporary file is removed and the target left as it was)."""
    h, failed = ctypes.c_void_p(), []
    check(lib.ckpt_atomic_file_begin(ctypes.byref(h), fspath(path)), path)

    def done():
        """The handle, which commit and abort free: put holds no more of it
        (a put kept past the write, called later, was a use after free)."""
        handle, h.value = h.value, None
        return handle

    try:
        def put(view):
            if not h.value:
                raise errors.InvalidArgumentError("the atomic write of this file is finished "
                                                  "(committed or aborted): no more writes", path)
            try:
                check(lib.ckpt_atomic_file_write(h, _addr(view), view.nbytes), path)
            except errors.Error as e:
                failed.append(e)
                raise
        if callable(data):
            data(put)
        else:
            put(memoryview(data).cast("B"))
    except BaseException as e:
        lib.ckpt_atomic_file_abort(done())
        # the write's own error, not what torch.save's zip writer makes of it
        if failed and e is not failed[0]:
            raise failed[0] from e
        raise
    check(lib.ckpt_atomic_file_commit(done()), path)


class _PieceWriter:
    """The file object torch.save writes into: its writes go straight to
    put (_write_atomic's; the tensor's memory as torch.save hands it over,
    no copy in between), small ones gathered into one write; each piece written is
    recorded with its XXH3 as (offset, length, xxh3, name) in pieces, for
    the read back from disk. name: the item being written."""

    _SMALL = 1 << 20

    def __init__(self, put, pieces):
        self.put, self.pieces, self.off, self.name = put, pieces, 0, ""
        self.small = bytearray()

    def write(self, b):
        view = memoryview(b).cast("B")
        n = view.nbytes
        if n < self._SMALL:
            self.small += view
            if len(self.small) >= self._SMALL:
                self.flush()
        else:
            self.flush()
            self._put(view)
        return n

    def flush(self):
        if self.small:
            small, self.small = self.small, bytearray()
            self._put(memoryview(small))

    def _put(self, view):
        n = view.nbytes
        self.pieces.append((self.off, n, _digest_mem(view), self.name))
        self.put(view)
        self.off += n


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


def _pread_into(fd, buf, off, path, what):
    """buf (a contiguous uint8 tensor) filled from fd at off, one pread per
    call (more only when the kernel returns less)."""
    n = buf.numel()
    if n == 0:
        return
    view, got = memoryview(buf.numpy()).cast("B"), 0
    while got < n:
        r = os.preadv(fd, [view[got:]], off + got)
        if r == 0:
            raise errors.TruncatedError("%s: %d bytes at offset %d expected, the file ends "
                                        "after %d" % (what, n, off, got), path, what, off + got)
        got += r


def _read_checked(fd, buf, off, want, path, name, expected, note=""):
    """buf filled from fd at off (_pread_into); ckpt.ChecksumError naming
    file, item and offset unless its XXH3 is want. expected: who says
    want."""
    _pread_into(fd, buf, off, path, name)
    got = _digest(buf)
    if got != want:
        raise errors.ChecksumError("XXH3 of %r as read from disk is %016x, %s %016x%s" % (
            name, got, expected, want, note), path, name, off)


def _torch_dtype(dtype, path, name):
    """The torch dtype of a safetensors dtype name, else
    ckpt.UnsupportedError."""
    import torch
    from ._load import _TORCH_DTYPES
    tdt = getattr(torch, _TORCH_DTYPES.get(dtype, ""), None)
    if tdt is None:
        raise errors.UnsupportedError("dtype %s of %r" % (dtype, name), path, name)
    return tdt


def _targets(reqs, planner):
    """Each request's target tensor (None for a bytes item)."""
    from torch.distributed.checkpoint.planner import LoadItemType
    return [None if r.type == LoadItemType.BYTE_IO else planner.resolve_tensor(r).detach()
            for r in reqs]


def _whole(reqs, targets, tdt, shape, length):
    """True when the one request in reqs takes its chunk whole (storage
    offsets 0, lengths the chunk's shape) into a contiguous CPU tensor of
    the chunk's torch dtype tdt, shape and byte size: the chunk is then
    read straight into that target."""
    if len(reqs) != 1 or targets[0] is None:
        return False
    req, t = reqs[0], targets[0]
    return (not any(req.storage_offsets) and list(req.lengths) == list(shape)
            and t.device.type == "cpu" and t.is_contiguous() and t.dtype == tdt
            and list(t.shape) == list(shape) and t.numel() * t.element_size() == length)


def _use_chunk(req, target, planner, buf, dtype, shape, path, name, off):
    """One request served from a verified chunk in buf into target."""
    from torch.distributed._shard._utils import narrow_tensor_by_index
    from torch.distributed.checkpoint.planner import LoadItemType
    if req.type == LoadItemType.BYTE_IO:
        planner.load_bytes(req, io.BytesIO(buf.numpy().tobytes()))
        return
    tdt = _torch_dtype(dtype, path, name)
    numel = 1
    for x in shape:
        numel *= x
    if numel * tdt.itemsize != buf.numel():
        raise errors.FormatError("tensor %r: %d bytes for shape %s of %s" % (
            name, buf.numel(), shape, dtype), path, name, off)
    t = narrow_tensor_by_index(buf.view(tdt).reshape(shape), req.storage_offsets, req.lengths)
    if target.size() != t.size():
        raise errors.MismatchError("%s: chunk of %s, target %s" % (
            name, list(t.size()), list(target.size())), path, name, off)
    target.copy_(t)
    planner.commit_tensor(req, target)


def _by_range(tensors):
    """{(offset, length): name} of a _header's tensors: the tensor whose
    data is exactly [offset, offset + length)."""
    return {(b, e - b): name for name, (_, _, b, e) in tensors.items()}


def _entry_at(at, off, length, path):
    """The name in _by_range's `at` of [off, off + length), else
    ckpt.MismatchError."""
    name = at.get((off, length))
    if name is None:
        raise errors.MismatchError(
            "no tensor's data is at [%d, %d) as .metadata says" % (off, off + length),
            path, "", off)
    return name


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
    ranges = {}
    for fqn, info in _storage_items(path, md):
        rel = info.relative_path
        if rel not in headers:
            p = os.path.join(path, rel)
            if not os.path.exists(p):
                raise errors.MismatchError("%s names %s, which is missing" % (
                    _METADATA, rel), p, fqn)
            headers[rel] = _header(p)
        if rel not in ranges:
            ranges[rel] = _by_range(headers[rel][0])
        digests = headers[rel][1]
        name = _entry_at(ranges[rel], info.offset, info.length, os.path.join(path, rel))
        if name not in digests:
            raise errors.ChecksumError("tensor %r has no ckpt.xxh3 digest" % name,
                                       os.path.join(path, rel), name)


def _storage_items(path, md):
    """(fqn, _StorageInfo) of every chunk and bytes item of md, each with
    storage in a data file of ckpt.dcp's naming (ckpt.MismatchError,
    ckpt.FormatError)."""
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
    for fqn, m in md.state_dict_metadata.items():
        idxs = ([MetadataIndex(fqn, c.offsets) for c in m.chunks]
                if isinstance(m, TensorStorageMetadata) else [MetadataIndex(fqn)])
        for idx in idxs:
            info = md.storage_data.get(idx)
            if info is None:
                raise errors.MismatchError("%s: chunk %s of %r has no storage" % (
                    _METADATA, list(idx.offset or ()), fqn), path, fqn)
            if not _DATA_NAME.match(info.relative_path):
                raise errors.FormatError("%s names the data file %r, not one of ckpt.dcp's" % (
                    _METADATA, info.relative_path), path, fqn)
            yield fqn, info


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
    interrupted overwrite leaves no checkpoint rather than a mixed one.

    serialization="safetensors" (the default): each rank's data file is a
    safetensors file with an XXH3 digest per chunk (the module's layout
    above); read it with ckpt.dcp.Reader or ckpt.dcp.load. DCP's own
    FileSystemReader cannot: it expects torch.save slices.

    serialization="torch_save": DCP's default layout, the one
    FileSystemWriter writes, so that plain dcp.load (FileSystemReader)
    reads it: each rank's "__N_0.distcp" is the torch.save archives of its
    tensors (a contiguous copy of a view, as DCP saves it) and the raw
    bytes of its bytes items, back to back; storage_data gives each
    slice. The zip CRC-32 of every tensor is the per-chunk checksum:
    `ckpt verify DIR` and ckpt.dcp.verify check every byte against it. The
    commit is the same: written through the atomic commit, dropped from
    the page cache and re-read from disk, every slice compared with the
    XXH3 of the bytes torch.save produced, before the rank reports;
    `.metadata` last, on the coordinator, once every slice is in place.
    ckpt.dcp.Reader refuses this layout (it has no digests of its own);
    ckpt.dcp.load verifies it whole, then reads it with FileSystemReader.
    The file carries none of ckpt's records (ckpt.versions and the like):
    a torch.save slice has no place for them."""

    def __init__(self, path, *, overwrite=True, serialization="safetensors"):
        super().__init__()
        if serialization not in ("safetensors", "torch_save"):
            raise errors.InvalidArgumentError(
                "serialization must be \"safetensors\" or \"torch_save\", not %r"
                % (serialization,), os.fspath(path))
        self.path = os.fspath(path)
        self.overwrite = overwrite
        self.serialization = serialization
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
        if self.serialization == "torch_save":
            fut = Future()
            fut.set_result(self._write_torch_save(
                "%s0%s" % (plan.storage_data, _SUFFIX), plan.items, planner))
            return fut
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
        hdr, _, _, _ = verify_file(path)
        _crash_point("after-verify")
        out = []
        for it in items:
            _, _, b, e = hdr[it.index.fqn]
            out.append(WriteResult(index=it.index, size_in_bytes=e - b,
                                   storage_data=_StorageInfo(name, b, e - b)))
        return out

    def _write_torch_save(self, name, items, planner):
        """DCP's layout (see the class): every item's bytes written in turn
        through the atomic commit, straight from the tensor's memory; then
        the file re-read from disk, every piece's XXH3 compared with that
        of the bytes written."""
        import torch
        from torch.distributed.checkpoint.filesystem import _StorageInfo
        from torch.distributed.checkpoint.planner import WriteItemType
        from torch.distributed.checkpoint.storage import WriteResult
        from torch.serialization import get_crc32_options
        if not get_crc32_options():
            raise errors.UnsupportedError(
                "Writer(serialization=\"torch_save\") needs torch.save's CRC-32s (the "
                "per-chunk checksum), but torch.serialization.config.save.compute_crc32 "
                "is off", self.path)
        path = os.path.join(self.path, name)
        pieces, slices = [], []  # slices: (item, offset, length)

        def fill(put):
            out = _PieceWriter(put, pieces)
            for item in items:
                data = planner.resolve_data(item)
                out.name, off = item.index.fqn, out.off + len(out.small)
                if item.type == WriteItemType.BYTE_IO:
                    out.write(data.getbuffer())
                else:
                    t = data.detach().cpu()
                    if t.untyped_storage().nbytes() != t.numel() * t.element_size():
                        t = t.clone()  # torch.save writes a view's whole storage
                    torch.save(t, out)
                slices.append((item, off, out.off + len(out.small) - off))
            out.flush()

        _crash_point("before-write")
        _write_atomic(path, fill)
        _crash_point("after-write")
        _verify_slices(path, pieces)
        _crash_point("after-verify")
        return [WriteResult(index=it.index, size_in_bytes=n,
                            storage_data=_StorageInfo(name, off, n))
                for it, off, n in slices]

    def finish(self, metadata, results):
        from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
        metadata.version = CURRENT_DCP_VERSION
        metadata.storage_data = {wr.index: wr.storage_data for rs in results for wr in rs}
        metadata.storage_meta = self.storage_meta()
        headers = {}
        if self.serialization == "torch_save":
            _check_slices(self.path, metadata, headers)
        else:
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
    cache first, best effort) and fully verified: sizes and digests.
    Returns its _header (parsed once for the caller too)."""
    from ._scan import verify
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        _drop_cached(fd)
    finally:
        os.close(fd)
    rep = verify(path)
    if not rep.ok:
        raise rep.error
    hdr = _header(path)
    if not hdr[1]:
        raise errors.ChecksumError("no ckpt.xxh3 digests", path)
    return hdr


def _addr(view):
    """The address of a byte buffer's memory, where it is (read-only
    buffers too: torch.save hands over the tensor's memory); None when
    empty."""
    import numpy as np
    return np.frombuffer(view, dtype=np.uint8).ctypes.data if view.nbytes else None


def _digest_mem(view):
    """XXH3-64 of a buffer's bytes, read where they are."""
    return lib.ckpt_xxh3_64(_addr(view), view.nbytes)


def _drop_cached(fd):
    """Best effort: the file's (clean, fsynced) pages out of the page
    cache, so that the next read comes from the device, not from the
    copies the write left in memory."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):
        pass


def _verify_slices(path, slices):
    """The file at path re-read from disk (its pages dropped from the page
    cache first): each slice (offset, length, xxh3, name) must have the
    digest of the bytes that were written (ckpt.ChecksumError, or
    ckpt.TruncatedError when the file is short). One pread per slice."""
    import torch
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        _drop_cached(fd)
        scratch = torch.empty(max([n for _, n, _, _ in slices] or [0]), dtype=torch.uint8)
        for off, n, want, name in slices:
            _read_checked(fd, scratch[:n], off, want, path, name, "the bytes written had")
    finally:
        os.close(fd)


def _check_slices(path, md, sizes):
    """Every item of md (DCP's torch.save layout) has storage in a data
    file of ckpt.dcp's naming that holds the whole slice; sizes:
    {relative_path: file size}, filled in."""
    for fqn, info in _storage_items(path, md):
        rel = info.relative_path
        p = os.path.join(path, rel)
        if rel not in sizes:
            try:
                sizes[rel] = os.stat(p).st_size
            except FileNotFoundError:
                raise errors.MismatchError("%s names %s, which is missing" % (
                    _METADATA, rel), p, fqn) from None
        if info.offset + info.length > sizes[rel]:
            raise errors.TruncatedError("%r: [%d, %d) is past the end of the file (%d bytes)" % (
                fqn, info.offset, info.offset + info.length, sizes[rel]), p, fqn, info.offset)


def _is_torch_save_layout(path, md):
    """True when the data files of md are DCP's torch.save slices (a zip
    at the first slice), False for ckpt's safetensors files."""
    for info in md.storage_data.values():
        p = os.path.join(path, info.relative_path)
        try:
            fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return False  # the layout check names the missing file
        try:
            return os.pread(fd, 4, info.offset) == b"PK\x03\x04"
        finally:
            os.close(fd)
    return False


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
        if _is_torch_save_layout(self.path, metadata):
            raise errors.UnsupportedError(
                "the data files hold torch.save slices (DCP's layout, Writer(..., "
                "serialization=\"torch_save\")) without ckpt's digests: check them with "
                "ckpt.dcp.verify, then read them with DCP's FileSystemReader or "
                "ckpt.dcp.load", self.path)
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
        """The requests of one data file: one open, one header parse, each
        chunk read once (one pread), its XXH3 checked over the very bytes
        that are then used. A chunk that one request takes whole into a
        contiguous CPU target of its dtype is read straight into the target
        (no buffer, no copy); other chunks (resharding, bytes items) go
        through one scratch buffer, reused."""
        import torch
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
            at = _by_range(tensors)
            chunks = {}  # (offset, length) -> [requests]
            for req in reqs:
                info = self.storage_data[req.storage_index]
                chunks.setdefault((info.offset, info.length), []).append(req)
            scratch = None
            for (off, length), creqs in chunks.items():
                name = _entry_at(at, off, length, path)
                want = digests.get(name)
                if want is None:
                    raise errors.ChecksumError("tensor %r has no ckpt.xxh3 digest" % name,
                                               path, name, off)
                dtype, shape, _, _ = tensors[name]
                targets = _targets(creqs, planner)
                tdt = getattr(torch, _TORCH_DTYPES.get(dtype, ""), None)
                whole = _whole(creqs, targets, tdt, shape, length)
                target = targets[0] if whole else None
                if target is not None:
                    buf = target.view(-1).view(torch.uint8)
                else:
                    if scratch is None or scratch.numel() < length:
                        scratch = torch.empty(length, dtype=torch.uint8)
                    buf = scratch[:length]
                _read_checked(fd, buf, off, want, path, name, "ckpt.xxh3 says",
                              "" if target is None else " (the target holds the unverified "
                              "bytes; nothing was committed)")
                if target is not None:
                    planner.commit_tensor(creqs[0], target)
                    continue
                for req, t in zip(creqs, targets):
                    _use_chunk(req, t, planner, buf, dtype, shape, path, name, off)
        finally:
            os.close(fd)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return isinstance(checkpoint_id, (str, os.PathLike))


# ------------------------------------------------------------ whole

_STRENGTH = ["none", "crc32", "digests"]  # ckpt_checksums' order, weakest first


def verify(path):
    """Full check of a DCP directory written by ckpt.dcp.Writer: the
    restricted `.metadata`, every chunk's storage in a file whose header
    agrees, every data file verified (sizes, digests), and no data file
    that `.metadata` does not name. Returns a ckpt.VerifyReport (format
    "dcp"); a problem gives ok=False with `error` set. checksums: the
    weakest of the data files' ("digests": every file's "ckpt.xxh3",
    which covers each tensor and each bytes item, was checked; it said
    "none" for them before), as the C verify names a set's."""
    from ._scan import VerifyReport
    path = os.fspath(path)
    ntensors = nbytes = 0
    sums = []
    try:
        md = read_metadata(path)
        if _is_torch_save_layout(path, md):
            return _verify_torch_save(path, md)
        headers = {}
        _check_layout(path, md, headers)
        _check_unnamed(path, headers)
        from ._scan import verify as verify_one
        for rel in sorted(headers):
            rep = verify_one(os.path.join(path, rel))
            if not rep.ok:
                raise rep.error
            ntensors += rep.tensors
            nbytes += rep.bytes
            sums.append(rep.checksums)
    except errors.Error as e:
        if isinstance(e, (errors.FileError, errors.OutOfMemoryError)) and \
                not isinstance(e, errors.NotFoundError):
            raise
        return VerifyReport(path, False, "dcp", ntensors, nbytes, 0, error=e)
    return VerifyReport(path, True, "dcp", ntensors, nbytes, 0,
                        checksums=min(sums, key=_STRENGTH.index) if sums else "none")


def _check_unnamed(path, named):
    """ckpt.MismatchError for a data file in path that is not in named
    (left by an earlier save, or a rank's output .metadata never got)."""
    for f in sorted(os.listdir(path)):
        if f.endswith(_SUFFIX) and f not in named:
            raise errors.MismatchError("%s is not named by %s" % (f, _METADATA),
                                       os.path.join(path, f))


def _verify_torch_save(path, md):
    """verify() of DCP's torch.save layout: the same checks of .metadata
    and the data files' names, then ckpt's C verify of the directory
    (every slice opened as the torch.save zip it is, every byte checked
    against its zip CRC-32)."""
    from ._scan import VerifyReport
    from ._scan import verify as verify_one
    sizes = {}
    _check_slices(path, md, sizes)
    _check_unnamed(path, sizes)
    rep = verify_one(path)
    return VerifyReport(path, rep.ok, "dcp", rep.tensors, rep.bytes, rep.members,
                        checksums=rep.checksums, error=rep.error)


def load(path):
    """The whole state dict of a DCP directory written by Writer, in this
    process (no process group needed), as DCP's dcp_to_torch_save builds
    it: every tensor assembled from its chunks, non-tensor items unpickled
    by DCP's planner, nested dicts restored. DCP's torch.save layout
    (Writer(..., serialization="torch_save")) is verified whole first
    (verify(): every byte against its zip CRC-32), then read by DCP's
    FileSystemReader."""
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    reader = Reader(path)
    if _is_torch_save_layout(reader.path, read_metadata(reader.path)):
        rep = verify(path)  # CRC of every byte first: FileSystemReader checks none
        if not rep.ok:
            raise rep.error
        reader = FileSystemReader(path)
    sd = {}
    _load_state_dict(sd, storage_reader=reader, planner=_EmptyStateDictLoadPlanner(),
                     no_dist=True)
    return sd


__all__ = ["Writer", "Reader", "verify", "load", "read_metadata"]
