#!/usr/bin/python3
"""The C reader of torch.distributed.checkpoint (DCP) directories, through
the CLI, against torch 2.13's own DCP: directories written by dcp.save
(FileSystemWriter, both serialization formats; one process, and 2 gloo
ranks with DTensor Shard(0), Shard(1) and Replicate), compared with what
torch.distributed.checkpoint.format_utils.dcp_to_torch_save assembles;
then corruption (flipped byte, truncated, missing and unnamed data files,
missing .metadata, gaps and overlaps made by editing .metadata) and
hostile pickles (.metadata, a bytes item).

Needs torch >= 2.4 with DCP's safetensors format: Debian's python3 has
torch 1.13, so the script re-runs itself with the repository's .venv
python (torch 2.13) when there is one, and otherwise says it is skipped.
Environment: CKPT_BIN, CKPT_SRC.
"""
import os
import sys

SRC = os.environ.get("CKPT_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_dcp  # noqa: E402

torch_dcp.require(SRC)

import hashlib  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
import zipfile  # noqa: E402
import io  # noqa: E402
import struct  # noqa: E402

import torch  # noqa: E402
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402

sys.path.insert(0, os.path.join(SRC, "tests"))
import suite  # noqa: E402

warnings.filterwarnings("ignore")
# dcp_to_torch_save logs a traceback before it falls back to __0.metadata
import logging  # noqa: E402
logging.getLogger().setLevel(logging.ERROR)  # state_dict_loader logs to the root
BIN = os.environ.get("CKPT_BIN", "ckpt")
GEN = os.path.join(SRC, "tests", "dcp", "dcp_gen.py")
TMP = tempfile.mkdtemp(prefix="ckpt-dcp-")


def gen(*args):
    r = subprocess.run([sys.executable, GEN] + list(args), timeout=600, capture_output=True)
    if r.returncode:
        sys.exit("dcp_gen.py %s: exit %d\n%s%s" % (" ".join(args), r.returncode,
                 r.stdout.decode(errors="replace")[-3000:], r.stderr.decode(errors="replace")[-6000:]))


# written once: the 2-rank run costs seconds of process start-up
SINGLE = os.path.join(TMP, "single")
SINGLE_ST = os.path.join(TMP, "single_st")
SHARDED = os.path.join(TMP, "sharded")
ODD = os.path.join(TMP, "odd")
gen("single", SINGLE)
gen("single", SINGLE_ST, "safetensors")
gen("sharded-both", SHARDED)
gen("odd", ODD)
SHARDED_PT = os.path.join(SHARDED, "torch_save")
SHARDED_ST = os.path.join(SHARDED, "safetensors")
# use_collectives=False: every rank's __R.metadata, and the same state dict
# saved with collectives (.metadata)
NOCOLL = os.path.join(SHARDED, "nocoll", "ranks")
NOCOLL_TWIN = os.path.join(SHARDED, "nocoll", "twin")
NOCOLL_ONE = os.path.join(ODD, "nocoll")
# HuggingFaceStorageWriter: sharded (no metadata at all), consolidated (an
# index, and the shards in sharded/), rank 0's full state dict (an index)
HF = {n: os.path.join(SHARDED, "hf", n) for n in ("dist", "cons/sharded", "cons", "rank0", "one")}
ALL = [SINGLE, SINGLE_ST, SHARDED_PT, SHARDED_ST]


def ckpt(*args):
    p = subprocess.run([BIN] + list(args), capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def inspect_json(d, *extra):
    rc, out, err = ckpt("inspect", "--json", "--hash", "sha256", *extra, d)
    assert rc == 0, err
    return json.loads(out)


def flatten(obj, prefix=""):
    """dcp_to_torch_save's nested state dict as ckpt names it: dict keys and
    list/tuple indices joined by '.'; empty containers give no entry."""
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return {prefix[:-1]: obj}
    out = {}
    for k, v in items:
        out.update(flatten(v, f"{prefix}{k}."))
    return out


DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16",
          torch.int16: "I16", torch.int32: "I32", torch.int64: "I64"}


def sha256(t):
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def torch_view(d):
    """What DCP itself assembles: dcp_to_torch_save, then torch.load."""
    out = os.path.join(TMP, os.path.basename(d) + "-oracle.pt")
    dcp_to_torch_save(d, out)
    return flatten(torch.load(out, weights_only=False))


def copy(d, name):
    dst = os.path.join(TMP, name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(d, dst)
    return dst


def chunk_of(d, name):
    """inspect --chunks of one tensor."""
    for t in inspect_json(d, "--chunks")["tensors"]:
        if t["name"] == name:
            return t["chunks"]
    raise AssertionError(f"{name} not in {d}")


def read_meta(d):
    with open(os.path.join(d, ".metadata"), "rb") as fh:
        return pickle.load(fh)  # our own, just written by torch


def write_meta(d, meta):
    with open(os.path.join(d, ".metadata"), "wb") as fh:
        pickle.dump(meta, fh)


# ------------------------------------------------------------ the view


def test_view_equals_dcp_to_torch_save():
    # torch 2.13's FileSystemReader cannot read the safetensors format (it
    # torch.loads each slice; only HuggingFaceStorageReader, which lists
    # "*.safetensors" files, reads DCP_SHARDING_INFO): those directories are
    # compared with their torch.save-format twin, saved from the same
    # state dict
    for d, oracle in ((SINGLE, SINGLE), (SHARDED_PT, SHARDED_PT), (SINGLE_ST, SINGLE),
                      (SHARDED_ST, SHARDED_PT)):
        want = torch_view(oracle)
        got = inspect_json(d)
        tensors = {t["name"]: t for t in got["tensors"]}
        values = {v["name"]: v["value"] for v in got["values"]}
        want_t = {k: v for k, v in want.items() if isinstance(v, torch.Tensor)}
        want_v = {k: v for k, v in want.items() if not isinstance(v, torch.Tensor)}
        assert got["format"] == "dcp", got["format"]
        assert sorted(tensors) == sorted(want_t), (d, sorted(tensors), sorted(want_t))
        for name, t in want_t.items():
            g = tensors[name]
            assert g["dtype"] == DTYPES[t.dtype], (d, name, g["dtype"], t.dtype)
            assert g["shape"] == list(t.shape), (d, name, g["shape"], t.shape)
            assert g["sha256"] == sha256(t), (d, name)
        assert values == want_v, (d, values, want_v)


def test_many_data_files():
    # 64 writer threads: 64 data files, each one safetensors part that every
    # chunk in it reads from (found by (file, offset) in a table; it was a
    # list searched for every chunk); the torch.save twin through
    # dcp_to_torch_save is the oracle
    d = os.path.join(TMP, "threads")
    gen("threads", d, "64")
    st, pt = os.path.join(d, "safetensors"), os.path.join(d, "torch_save")
    files = sorted(f for f in os.listdir(st) if f.endswith(".distcp"))
    assert len(files) == 64, files
    want = torch_view(pt)
    got = inspect_json(st, "--chunks")
    tensors = {t["name"]: t for t in got["tensors"]}
    want_t = {k: v for k, v in want.items() if isinstance(v, torch.Tensor)}
    assert len(want_t) == 1024 and sorted(tensors) == sorted(want_t)
    for name, t in want_t.items():
        g = tensors[name]
        assert (g["dtype"], g["shape"]) == (DTYPES[t.dtype], list(t.shape)), (name, g, t)
        assert g["sha256"] == sha256(t), name
    assert {v["name"]: v["value"] for v in got["values"]} == {"step": 3}
    # each chunk read from the file .metadata places it in, all 64 read
    where = {k.fqn: v.relative_path for k, v in read_meta(st).storage_data.items()}
    chunks = {n: t["chunks"] for n, t in tensors.items()}
    assert all(len(c) == 1 for c in chunks.values())
    assert {n: c[0]["file"] for n, c in chunks.items()} == {n: where[n] for n in chunks}
    assert {c[0]["file"] for c in chunks.values()} == set(files)
    rc, out, err = ckpt("verify", st)
    assert rc == 0 and out.startswith("OK ") and "1024 keys" in out, out + err


def test_one_data_file_many_tensors():
    # one writer thread: a data file of 512 tensors, whose DCP_SHARDING_INFO
    # (512 entries) is parsed once, not once per chunk: jansson's
    # allocations while libckpt opens the directory in this process are
    # counted (json_set_alloc_funcs): 5,129, against 2,626,048 when every
    # chunk parsed the text again (a DCP of 8,192 tensors took 62 s of CPU
    # to inspect, now 0.09 s)
    import ctypes
    d = os.path.join(TMP, "one_file")
    code = ("import sys, torch, torch.distributed.checkpoint as dcp; sys.path.insert(0, %r); "
            "from dcp_gen import writer; "
            "dcp.save({f'l.{i}': torch.full((2, 3), float(i)) for i in range(512)}, "
            "storage_writer=writer(%r, 'safetensors'))" % (os.path.dirname(GEN), d))
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)
    assert sorted(os.listdir(d)) == [".metadata", "__0_0.distcp"]
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    calls = [0]

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
    def counted(n):
        calls[0] += 1
        return libc.malloc(n)

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    def release(p):
        libc.free(p)

    jansson = ctypes.CDLL("libjansson.so.4")
    lib = ctypes.CDLL(os.environ.get("CKPT_LIB", os.path.join(SRC, "build", "libckpt.so")))
    lib.ckpt_open.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_void_p]
    lib.ckpt_close.argtypes = [ctypes.c_void_p]
    lib.ckpt_file_tensor_count.argtypes = [ctypes.c_void_p]
    lib.ckpt_file_tensor_count.restype = ctypes.c_size_t
    f = ctypes.c_void_p()
    jansson.json_set_alloc_funcs(counted, release)
    try:
        rc = lib.ckpt_open(ctypes.byref(f), d.encode(), None)
        n = lib.ckpt_file_tensor_count(f) if rc == 0 else None
        lib.ckpt_close(f)
    finally:
        jansson.json_set_alloc_funcs(ctypes.cast(libc.malloc, ctypes.c_void_p),
                                     ctypes.cast(libc.free, ctypes.c_void_p))
    assert rc == 0 and n == 512, (rc, n)
    assert 512 < calls[0] < 20 * 512, calls[0]
    t = {x["name"]: x for x in inspect_json(d)["tensors"]}
    assert t["l.511"]["sha256"] == sha256(torch.full((2, 3), 511.0)), t["l.511"]


def test_sharded_chunks_name_ranks_and_boxes():
    for d in (SHARDED_PT, SHARDED_ST):
        w0 = chunk_of(d, "w0")
        assert [(c["file"], c["rank"], c["offsets"], c["sizes"]) for c in w0] == [
            ("__0_0.distcp", 0, [0, 0], [4, 5]), ("__1_0.distcp", 1, [4, 0], [3, 5])], w0
        w1 = chunk_of(d, "w1")
        assert [(c["rank"], c["offsets"], c["sizes"]) for c in w1] == [
            (0, [0, 0], [3, 3]), (1, [0, 3], [3, 3])], w1
        assert len(chunk_of(d, "rep")) == 1  # replicated: saved once
        st = chunk_of(d, "st")  # a ShardedTensor, uneven
        assert [(c["rank"], c["offsets"], c["sizes"]) for c in st] == [
            (0, [0, 0], [3, 4]), (1, [3, 0], [2, 4])], st
    # torch.save format: each chunk is its own zip at (offset, length)
    for c in chunk_of(SHARDED_PT, "w0"):
        with open(os.path.join(SHARDED_PT, c["file"]), "rb") as fh:
            fh.seek(c["offset"])
            blob = fh.read(c["length"])
        t = torch.load(io.BytesIO(blob), weights_only=True)
        assert list(t.shape) == c["sizes"]


def test_text_chunks_listing():
    rc, out, err = ckpt("inspect", "--chunks", SHARDED_PT)
    assert rc == 0, err
    assert "    chunk __1_0.distcp offset " in out and " rank 1 offsets [4, 0] sizes [3, 5]" in out, out


def test_metadata_pickle_protocols():
    """.metadata re-dumped at every pickle protocol: torch's read_metadata
    (pickle.load) reads them all alike. Protocols 0 and 1 save each DCP
    dataclass as copyreg._reconstructor(cls, object, None) and BUILD: ckpt
    called that no DCP metadata class (inspect/verify CORRUPT, scan
    'suspicious', DIR/.metadata a plain pickle with 'dangerous' DCP
    classes, so ckpt.load(DIR) refused it)."""
    want = torch_view(SINGLE)
    for proto in range(6):
        d = copy(SINGLE, "proto%d" % proto)
        write_meta_at(d, read_meta(d), proto)
        assert flatten(torch.load(_oracle_file(d), weights_only=False)).keys() == want.keys()
        got = inspect_json(d)
        tensors = {t["name"]: t["sha256"] for t in got["tensors"]}
        assert tensors == {k: sha256(v) for k, v in want.items() if isinstance(v, torch.Tensor)}, \
            (proto, tensors)
        rc, out, err = ckpt("verify", d)
        assert rc == 0 and out.startswith("OK "), (proto, out + err)
        for path in (d, os.path.join(d, ".metadata")):
            rc, out, err = ckpt("scan", path)
            assert rc == 0 and out.startswith("SAFE "), (proto, out + err)
        rc, out, err = ckpt("inspect", "--json", os.path.join(d, ".metadata"))
        assert rc == 0 and json.loads(out)["format"] == "dcp", (proto, out + err)
    # the same call with another base is no DCP object
    d = copy(SINGLE, "proto0_base")
    write_meta_at(d, read_meta(d), 0)
    path = os.path.join(d, ".metadata")
    with open(path, "rb") as fh:
        data = fh.read()
    assert data.count(b"c__builtin__\nobject\n") == 1, data[:200]
    with open(path, "wb") as fh:
        fh.write(data.replace(b"c__builtin__\nobject\n", b"ctorch\nSize\n"))
    rc, out, err = ckpt("verify", d)
    assert rc == 1 and "copyreg._reconstructor" in out, out + err


def test_metadata_reconstructor_of_a_data_builder_is_not_safe():
    """copyreg._reconstructor(Metadata, dict, None) or (OrderedDict, object,
    None) in a protocol 0 .metadata: pickle.load raises TypeError, so
    torch cannot read the directory and ckpt finds no data files. The
    pickle scan allows builtins.dict and collections.OrderedDict in any
    other pickle, so it flagged nothing, and scan said SAFE of a directory
    whose data files it never scanned; now UNSCANNABLE, naming the
    class."""
    cases = {"base_dict": (b"c__builtin__\nobject\n", b"c__builtin__\ndict\n"),
             "cls_odict": (b"ctorch.distributed.checkpoint.metadata\nMetadata\n",
                           b"ccollections\nOrderedDict\n")}
    for name, (old, new) in cases.items():
        d = copy(SINGLE, "reconstructor_" + name)
        write_meta_at(d, read_meta(d), 0)
        path = os.path.join(d, ".metadata")
        with open(path, "rb") as fh:
            data = fh.read()
        assert old in data, data[:200]
        with open(path, "wb") as fh:
            fh.write(data.replace(old, new, 1))
        try:
            with open(path, "rb") as fh:
                pickle.load(fh)
            raise AssertionError(name + ": pickle.load read it")
        except TypeError:
            pass
        rc, out, err = ckpt("verify", d)
        assert rc == 1 and out.startswith("CORRUPT "), (name, out + err)
        rc, out, err = ckpt("scan", d)
        assert rc == 1 and out.startswith("UNSCANNABLE ") and "data files cannot be found" in out \
            and (b"dict" in new and "builtins.dict" in out or "collections.OrderedDict" in out), \
            (name, out + err)


def _oracle_file(d):
    out = os.path.join(TMP, os.path.basename(d) + "-oracle.pt")
    dcp_to_torch_save(d, out)
    return out


def write_meta_at(d, meta, protocol):
    with open(os.path.join(d, ".metadata"), "wb") as fh:
        pickle.dump(meta, fh, protocol=protocol)


def test_data_file_link_out_of_the_directory():
    """A data file that is a link to a file elsewhere: FileSystemReader
    opens DIR/relative_path and follows it, as ckpt reads it; scan says so
    as it does for a sharded set's shard (it said nothing for DCP)."""
    d = copy(SHARDED_PT, "link_out")
    target = os.path.join(TMP, "link_out_target.distcp")
    shutil.move(os.path.join(d, "__1_0.distcp"), target)
    os.symlink(target, os.path.join(d, "__1_0.distcp"))
    want = torch_view(d)
    assert inspect_json(d)["tensors"] == inspect_json(SHARDED_PT)["tensors"]
    assert {t["name"]: t["sha256"] for t in inspect_json(d)["tensors"]} == \
        {k: sha256(v) for k, v in want.items() if isinstance(v, torch.Tensor)}
    rc, out, err = ckpt("scan", d)
    assert rc == 0 and "SAFE " in out and "shard-link (member __1_0.distcp" in out \
        and target in out, out + err


def test_relative_path_with_a_nul_byte():
    """relative_path "__0_0.distcp\\0x": open() raises 'embedded null byte'
    in FileSystemReader; ckpt cut the name at the NUL and read
    __0_0.distcp: OK and SAFE."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    d = copy(SHARDED_PT, "nul_path")
    meta = read_meta(d)
    key = next(k for k, v in meta.storage_data.items() if v.relative_path == "__0_0.distcp")
    v = meta.storage_data[key]
    meta.storage_data[key] = _StorageInfo(v.relative_path + "\0x", v.offset, v.length)
    write_meta(d, meta)
    dcp_to_torch_save_fails(d, "embedded null byte")
    verify_fails(d, "NUL byte", key.fqn)
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSCANNABLE" in out and "NUL byte" in out, out + err


def test_tensor_size_a_list():
    """A TensorStorageMetadata size pickled as a list: every load planner
    compares it with the tensor's torch.Size and raises (a list never
    equals a tuple); ckpt said OK. A tuple is fine for both."""
    for kind, fails in ((list, True), (tuple, False)):
        d = copy(SHARDED_PT, "size_" + kind.__name__)
        meta = read_meta(d)
        meta.state_dict_metadata["w0"].size = kind(meta.state_dict_metadata["w0"].size)
        write_meta(d, meta)
        if fails:
            dcp_to_torch_save_fails(d, "Size mismatch between saved")
            verify_fails(d, "w0", "expected a torch.Size as size, got list")
        else:
            assert torch_view(d).keys() == torch_view(SHARDED_PT).keys()
            rc, out, err = ckpt("verify", d)
            assert rc == 0, out + err


def test_legacy_format_slices():
    """A slice holding torch.save's legacy (non-zip) format: FileSystemReader
    torch.loads every slice, and torch.load reads that format, for a
    tensor chunk and for a bytes item (DefaultLoadPlanner.load_bytes)
    alike. ckpt read the chunk but called the bytes item CORRUPT ('not a
    torch.save zip'). A hostile legacy bytes item is UNSAFE."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import MetadataIndex
    d = os.path.join(TMP, "legacy_slices")
    dcp.save({"w": torch.ones(4), "step": 3}, checkpoint_id=d)
    meta = read_meta(d)
    path = os.path.join(d, "__0_0.distcp")
    for key, obj in ((MetadataIndex("w", torch.Size([0])), torch.arange(4.)),
                     (MetadataIndex("step"), {"epoch": 7, "t": torch.full((2,), 5.0)})):
        buf = io.BytesIO()
        torch.save(obj, buf, _use_new_zipfile_serialization=False)
        at = os.path.getsize(path)
        with open(path, "ab") as fh:
            fh.write(buf.getvalue())
        meta.storage_data[key] = _StorageInfo("__0_0.distcp", at, len(buf.getvalue()))
    write_meta(d, meta)
    want = torch_view(d)
    assert want["step.epoch"] == 7 and torch.equal(want["w"], torch.arange(4.)), want
    got = inspect_json(d)
    assert {t["name"]: t["sha256"] for t in got["tensors"]} == \
        {k: sha256(v) for k, v in want.items() if isinstance(v, torch.Tensor)}, got
    assert {v["name"]: v["value"] for v in got["values"]} == {"step.epoch": 7}, got
    rc, out, err = ckpt("verify", d)
    assert rc == 0 and out.startswith("OK "), out + err
    rc, out, err = ckpt("scan", d)
    assert rc == 0 and out.startswith("SAFE "), out + err
    buf = io.BytesIO()
    torch.save(_System(), buf, _use_new_zipfile_serialization=False)
    at = os.path.getsize(path)
    with open(path, "ab") as fh:
        fh.write(buf.getvalue())
    meta.storage_data[MetadataIndex("step")] = _StorageInfo("__0_0.distcp", at, len(buf.getvalue()))
    write_meta(d, meta)
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSAFE" in out and "posix.system" in out, out + err


def test_metadata_path_opens_the_directory():
    rc, out, err = ckpt("inspect", "--json", os.path.join(SHARDED_PT, ".metadata"))
    assert rc == 0, err
    assert json.loads(out)["format"] == "dcp"
    assert len(json.loads(out)["tensors"]) == 5


def test_verify_ok():
    for d, checksums in ((SINGLE, "crc32"), (SHARDED_PT, "crc32"), (SINGLE_ST, "none"),
                         (SHARDED_ST, "none")):
        rc, out, err = ckpt("verify", "--json", d)
        assert rc == 0, out + err
        r = json.loads(out)
        assert r["ok"] and r["format"] == "dcp" and r["checksums"] == checksums, r
        assert r["bytes"] > 0


def test_scan_safe():
    for d in ALL:
        rc, out, err = ckpt("scan", d)
        assert rc == 0 and out.startswith("SAFE "), out + err


def test_doctor():
    rc, out, err = ckpt("doctor", SHARDED_PT)
    assert rc == 0, err
    assert "dcp" in out and "integrity\n  OK" in out, out


def test_convert_to_one_file():
    want = torch_view(SHARDED_PT)
    from safetensors.torch import load_file
    st = os.path.join(TMP, "conv.safetensors")
    pt = os.path.join(TMP, "conv.pt")
    for out in (st, pt):
        rc, o, err = ckpt("convert", SHARDED_PT, out)
        assert rc == 0, o + err
    got_st = load_file(st)
    got_pt = flatten(torch.load(pt, weights_only=True))
    for name, t in want.items():
        if isinstance(t, torch.Tensor):
            assert torch.equal(got_st[name], t) and torch.equal(got_pt[name], t), name
        else:
            assert got_pt[name] == t, name


def whole_file_safetensors(name):
    """SINGLE's items in the layout of ckpt.dcp.Writer (python/ckpt/dcp.py):
    one safetensors file per rank holding every tensor under its fqn (with
    DCP_SHARDING_INFO) and every bytes item as a U8 tensor of its torch.save
    bytes; each _StorageInfo is [offset, offset + length) of exactly that
    tensor's data."""
    from safetensors.torch import save_file
    d = os.path.join(TMP, name)
    os.makedirs(d)
    meta = read_meta(SINGLE)
    tensors, sharding = {}, {}
    for key, info in meta.storage_data.items():
        with open(os.path.join(SINGLE, info.relative_path), "rb") as fh:
            fh.seek(info.offset)
            blob = fh.read(info.length)
        if key.offset is None:  # a bytes item: its torch.save bytes
            tensors[key.fqn] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        else:
            tensors[key.fqn] = torch.load(io.BytesIO(blob), weights_only=True).contiguous()
            sharding[key.fqn] = {"saved_offsets": list(key.offset)}
    path = os.path.join(d, "__0_0.distcp")
    save_file(tensors, path, metadata={"DCP_SHARDING_INFO": json.dumps(sharding),
                                       "DCP_VERSION": "1.0", "format": "pt"})
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    for key, info in meta.storage_data.items():
        b, e = header[key.fqn]["data_offsets"]
        info.relative_path, info.offset, info.length = "__0_0.distcp", 8 + n + b, e - b
    write_meta(d, meta)
    return d


def test_whole_file_safetensors_layout():
    d = whole_file_safetensors("ckpt_writer_layout")
    want = inspect_json(SINGLE)
    got = inspect_json(d)
    assert got["tensors"] == want["tensors"], (got["tensors"], want["tensors"])
    assert got["values"] == want["values"]
    rc, out, err = ckpt("verify", d)
    assert rc == 0 and out.startswith("OK "), out + err
    rc, out, err = ckpt("scan", d)
    assert rc == 0 and out.startswith("SAFE "), out + err
    # a slice that is not where the header has the tensor
    meta = read_meta(d)
    key = next(k for k in meta.storage_data if k.fqn == "model.w")
    meta.storage_data[key].offset += 4
    write_meta(d, meta)
    verify_fails(d, "model.w")


def skeleton(obj):
    """Containers and keys, leaves by type: the structure to compare."""
    if isinstance(obj, dict):
        return {k: skeleton(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [type(obj).__name__] + [skeleton(v) for v in obj]
    return type(obj).__name__


def test_convert_nests_like_dcp_to_torch_save():
    """planner_data puts every item back in place (DCP's set_element: an int
    key in the path makes a list, as param_groups is)."""
    oracle = os.path.join(TMP, "nest-oracle.pt")
    dcp_to_torch_save(SINGLE, oracle)
    want = torch.load(oracle, weights_only=False)
    out = os.path.join(TMP, "nest.pt")
    rc, o, err = ckpt("convert", SINGLE, out)
    assert rc == 0, o + err
    got = torch.load(out, weights_only=False)
    assert isinstance(want["optim"]["param_groups"], list)
    assert skeleton(got) == skeleton(want), (skeleton(got), skeleton(want))


# ------------------------------------------------------------ corruption


def verify_fails(d, *needles):
    rc, out, err = ckpt("verify", d)
    assert rc == 1 and out.startswith("CORRUPT "), out + err
    for n in needles:
        assert n in out, (n, out)
    return out


def test_flipped_byte_in_a_chunk_fails_its_crc():
    d = copy(SHARDED_PT, "flip")
    c = chunk_of(d, "w0")[1]
    path = os.path.join(d, c["file"])
    with open(path, "rb") as fh:
        data = bytearray(fh.read())
    z = zipfile.ZipFile(io.BytesIO(bytes(data[c["offset"]:c["offset"] + c["length"]])))
    info = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
    local = c["offset"] + info.header_offset
    name_len = int.from_bytes(data[local + 26:local + 28], "little")
    extra_len = int.from_bytes(data[local + 28:local + 30], "little")
    at = local + 30 + name_len + extra_len + 5
    data[at] ^= 0x40
    with open(path, "wb") as fh:
        fh.write(data)
    out = verify_fails(d, "__1_0.distcp", "CRC")
    # inspect still opens it (structure is intact), the hash changed
    h = {t["name"]: t["sha256"] for t in inspect_json(d)["tensors"]}
    assert h["w0"] != {t["name"]: t["sha256"] for t in inspect_json(SHARDED_PT)["tensors"]}["w0"], out


def test_truncated_data_file():
    for src in (SHARDED_PT, SHARDED_ST):
        d = copy(src, "trunc")
        path = os.path.join(d, "__1_0.distcp")
        os.truncate(path, os.path.getsize(path) - 100)
        verify_fails(d, "__1_0.distcp")
        rc, _, err = ckpt("inspect", d)
        assert rc == 1 and "__1_0.distcp" in err, err


def test_missing_data_file():
    d = copy(SHARDED_PT, "missing")
    os.remove(os.path.join(d, "__1_0.distcp"))
    verify_fails(d, "__1_0.distcp", "missing")


def test_unnamed_data_file():
    d = copy(SHARDED_PT, "extra")
    shutil.copy(os.path.join(d, "__0_0.distcp"), os.path.join(d, "__7_0.distcp"))
    verify_fails(d, "__7_0.distcp", "not named by .metadata")
    assert ckpt("inspect", d)[0] == 0  # opening it is fine: no loader reads it


def test_empty_data_files_of_idle_writers():
    """FileSystemWriter opens a data file per writer thread (and dcp.save({})
    one per rank) whether or not an item goes there: thread_count=8 for 2
    tensors leaves __0_2.distcp .. __0_7.distcp empty and unnamed. DCP
    loads it; ckpt verify said CORRUPT ('not named by .metadata'). A
    non-empty unnamed file is still reported (test_unnamed_data_file)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter
    for name, sd, threads in (("idle_threads", {"a": torch.ones(2), "b": torch.arange(3.)}, 8),
                              ("nothing_saved", {}, 1)):
        d = os.path.join(TMP, name)
        dcp.save(sd, storage_writer=FileSystemWriter(d, thread_count=threads))
        empty = [f for f in os.listdir(d) if f.endswith(".distcp") and not os.path.getsize(os.path.join(d, f))]
        assert empty, os.listdir(d)
        want = torch_view(d)
        assert {t["name"]: t["sha256"] for t in inspect_json(d)["tensors"]} == \
            {k: sha256(v) for k, v in want.items()}
        rc, out, err = ckpt("verify", d)
        assert rc == 0 and out.startswith("OK "), out + err


def test_missing_metadata():
    d = copy(SHARDED_PT, "nometa")
    os.remove(os.path.join(d, ".metadata"))
    verify_fails(d, ".metadata", "missing")
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSCANNABLE" in out and "no .metadata" in out, out + err


def test_gap_in_a_tensor():
    d = copy(SHARDED_PT, "gap")
    meta = read_meta(d)
    meta.state_dict_metadata["w0"].chunks.pop()
    write_meta(d, meta)
    verify_fails(d, "w0", "gap", "20 of its 35 elements")


def dcp_to_torch_save_fails(d, needle):
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException
    try:
        dcp_to_torch_save(d, os.path.join(TMP, "oracle-fails.pt"))
    except CheckpointException as e:  # with the rank's error
        assert needle in str(e), str(e)[-500:]
        return
    raise AssertionError("dcp_to_torch_save read %s: the case proves nothing" % d)


def test_planner_path_is_the_fqn():
    """DCP names an item by its planner_data path joined with '.': a path
    that is another name fails dcp_to_torch_save; ckpt said OK and put the
    tensor there."""
    d = copy(SINGLE, "planner-other")
    meta = read_meta(d)
    fqn = next(k for k, v in meta.planner_data.items() if len(v) > 1)
    meta.planner_data[fqn] = tuple(meta.planner_data[fqn][:-1]) + ("elsewhere",)
    write_meta(d, meta)
    dcp_to_torch_save_fails(d, "Missing key in checkpoint state_dict")
    verify_fails(d, fqn, "not the fqn")


def test_list_left_with_bytes_items_only():
    """dcp.save of a list whose dict entries hold nothing ({"c": [[], {}]}:
    one item, c.0) writes a checkpoint its own load cannot read: the list
    rebuilt from planner_data holds a bytes item alone, and DCP's
    flatten_state_dict names such a list as a whole, "c", which the
    metadata lacks (dcp_to_torch_save: 'Missing key in checkpoint
    state_dict: c'); ckpt said OK. Lists that keep a tensor, a dict or
    such a list load in both."""
    import torch.distributed.checkpoint as dcp
    cases = {"bare": ({"c": [[], {}], "t": torch.ones(1)}, "c"),
             "int_and_empty": ({"m": {"x": [5, {}]}, "t": torch.ones(1)}, "m.x"),
             "inner": ({"c": [[torch.ones(1)], [[1], {}]]}, "c.1"),
             "kept_by_dict": ({"c": [5, {"a": 1}]}, None),
             "kept_by_tensor": ({"c": [[1], [torch.ones(2)], 3]}, None),
             "kept_by_list": ({"c": [[1], [[torch.zeros(1)], 2]]}, None)}
    for name, (sd, missing) in cases.items():
        d = os.path.join(TMP, "bytes_only_" + name)
        dcp.save(sd, checkpoint_id=d)
        if missing:
            dcp_to_torch_save_fails(d, "Missing key in checkpoint state_dict: %s." % missing)
            verify_fails(d, "a list of bytes items only", '"%s"' % missing)
        else:
            want = torch_view(d)
            got = inspect_json(d)
            assert {t["name"]: t["sha256"] for t in got["tensors"]} == \
                {k: sha256(v) for k, v in want.items() if isinstance(v, torch.Tensor)}, name
            rc, out, err = ckpt("verify", d)
            assert rc == 0, (name, out + err)


def test_planner_path_leaves_a_list_entry_empty():
    """The items of list entry 0 (param_groups[0]) moved to entry 1, names
    and paths alike: dcp_to_torch_save's list holds a None at 0, a key the
    metadata lacks; ckpt said OK."""
    from torch.distributed.checkpoint.metadata import MetadataIndex
    d = copy(SINGLE, "planner-hole")
    meta = read_meta(d)
    paths = meta.planner_data
    at = next(v.index(0) for v in paths.values() if 0 in v[1:])  # an int key: a list
    for fqn, v in [(k, v) for k, v in paths.items() if len(v) > at and v[at] == 0]:
        path = v[:at] + (1,) + v[at + 1:]
        new = ".".join(map(str, path))
        meta.state_dict_metadata[new] = meta.state_dict_metadata.pop(fqn)
        paths[new] = path
        del paths[fqn]
        for k in [k for k in meta.storage_data if k.fqn == fqn]:
            meta.storage_data[MetadataIndex(new, k.offset, k.index)] = meta.storage_data.pop(k)
    write_meta(d, meta)
    dcp_to_torch_save_fails(d, "Missing key in checkpoint state_dict")
    verify_fails(d, "list entries without an item")


def test_overlapping_chunks():
    d = copy(SHARDED_PT, "overlap")
    meta = read_meta(d)
    from torch.distributed.checkpoint.metadata import MetadataIndex
    chunk = meta.state_dict_metadata["w0"].chunks[1]
    old = MetadataIndex("w0", chunk.offsets)
    chunk.offsets = torch.Size([3, 0])  # rows 3..5 instead of 4..6
    meta.storage_data[MetadataIndex("w0", chunk.offsets)] = meta.storage_data.pop(old)
    write_meta(d, meta)
    verify_fails(d, "w0", "overlap")


def test_chunk_sizes_that_do_not_match_the_slice():
    d = copy(SHARDED_PT, "sizes")
    meta = read_meta(d)
    meta.state_dict_metadata["w0"].chunks[1].sizes = torch.Size([2, 5])
    write_meta(d, meta)
    verify_fails(d, "w0")


# ------------------------------------------------------------ hostile pickles


class _System:
    def __reduce__(self):
        return (os.system, ("true",))



class _Touch:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, ("touch " + self.path,))

def test_hostile_metadata_is_unsafe():
    d = copy(SINGLE, "hostile_meta")
    with open(os.path.join(d, ".metadata"), "wb") as fh:
        pickle.dump(_System(), fh)
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSAFE" in out and "posix.system" in out, out + err
    rc, out, err = ckpt("inspect", d)
    assert rc == 1 and "posix.system" in err and "no DCP metadata class" in err, err


def test_hostile_metadata_that_starts_like_dcp():
    d = copy(SINGLE, "hostile_meta2")
    meta = read_meta(d)
    meta.planner_data = _System()  # after the Metadata class: detected as DCP
    write_meta(d, meta)
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSAFE" in out and "posix.system" in out, out + err
    rc, out, err = ckpt("verify", d)
    assert rc == 1 and "posix.system" in out, out + err


def test_hostile_bytes_item_is_unsafe():
    import torch.distributed.checkpoint as dcp
    d = os.path.join(TMP, "hostile_bytes")
    dcp.save({"w": torch.ones(3), "evil": _System()}, checkpoint_id=d)
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSAFE" in out and "__0_0.distcp@" in out and "posix.system" in out, \
        out + err


def test_torchscript_bytes_item_names_its_data_file():
    """A bytes item holding a TorchScript archive: DefaultLoadPlanner.load_bytes
    torch.loads it (weights_only=False), which hands it to torch.jit.load.
    The scan's torchscript finding named the archive's member alone
    ("archive/code/__torch__.py"), not the data file and slice holding it,
    as every other finding inside the item does ("__1_0.distcp@0:...")."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import MetadataIndex
    d = os.path.join(TMP, "torchscript_bytes")
    dcp.save({"w": torch.ones(3), "step": 3}, checkpoint_id=d)
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), buf)
    with open(os.path.join(d, "__1_0.distcp"), "wb") as fh:
        fh.write(buf.getvalue())
    meta = read_meta(d)
    meta.storage_data[MetadataIndex("step")] = _StorageInfo("__1_0.distcp", 0, len(buf.getvalue()))
    write_meta(d, meta)
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    got = {}  # what dcp_to_torch_save assembles, before it torch.saves it
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _load_state_dict(got, storage_reader=FileSystemReader(d),
                         planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    assert isinstance(got["step"], torch.jit.ScriptModule), got  # torch.jit.load ran
    assert any("TorchScript" in str(w.message) for w in seen), [str(w.message) for w in seen]
    rc, out, err = ckpt("scan", d)
    ts = [line for line in out.splitlines() if "dangerous  torchscript" in line]
    assert rc == 1 and "UNSAFE" in out and len(ts) == 1, out + err
    assert "(member __1_0.distcp@0:archive/code/" in ts[0], ts


# ------------------------------------------------------------ use_collectives=False


def tensors_and_values(d):
    got = inspect_json(d)
    return ({t["name"]: (t["dtype"], t["shape"], t["sha256"]) for t in got["tensors"]},
            {v["name"]: v["value"] for v in got["values"]}, got["format"])


def expected(want):
    return ({k: (DTYPES[t.dtype], list(t.shape), sha256(t)) for k, t in want.items()
             if isinstance(t, torch.Tensor)},
            {k: v.hex() if isinstance(v, bytes) else v for k, v in want.items()
             if not isinstance(v, torch.Tensor)})  # inspect --json gives bytes in hex


def test_no_collectives_one_rank_equals_dcp_to_torch_save():
    # dcp_to_torch_save finds no .metadata and falls back to __0.metadata
    assert sorted(os.listdir(NOCOLL_ONE)) == ["__0.metadata", "__0_0.distcp"]
    t, v, fmt = tensors_and_values(NOCOLL_ONE)
    assert fmt == "dcp"
    assert (t, v) == expected(torch_view(NOCOLL_ONE)), (t, v)
    assert sorted(t) == ["a", "l.0", "n.b"] and v == {"l.1": "x", "n.s": 1}, (t, v)


def test_no_collectives_ranks_are_merged():
    """Each rank's __R.metadata holds the chunks that rank saved (DTensor
    shards; replicated tensors and bytes items by every rank): the union is
    the collective save of the same state dict."""
    assert sorted(os.listdir(NOCOLL)) == ["__0.metadata", "__0_0.distcp", "__1.metadata",
                                          "__1_0.distcp"]
    from torch.distributed.checkpoint import FileSystemReader
    per_rank = [FileSystemReader(NOCOLL).read_metadata(rank=r) for r in (0, 1)]
    w0 = [[list(c.offsets) for c in m.state_dict_metadata["w0"].chunks] for m in per_rank]
    assert w0 == [[[0, 0]], [[4, 0]]], w0  # rank 0 alone does not hold w0
    t, v, fmt = tensors_and_values(NOCOLL)
    assert fmt == "dcp"
    want_t, want_v = expected(torch_view(NOCOLL_TWIN))
    assert t == want_t and v == want_v, (t, want_t, v, want_v)
    # the replicated tensor, saved by both ranks: rank 0's copy is read
    rep = chunk_of(NOCOLL, "rep")
    assert [(c["file"], c["offsets"]) for c in rep] == [("__0_0.distcp", [0])], rep
    assert [(c["file"], c["sizes"]) for c in chunk_of(NOCOLL, "w0")] == [
        ("__0_0.distcp", [4, 5]), ("__1_0.distcp", [3, 5])]
    rc, out, err = ckpt("verify", NOCOLL)
    assert rc == 0 and out.startswith("OK "), out + err
    rc, out, err = ckpt("scan", NOCOLL)
    assert rc == 0 and out.startswith("SAFE "), out + err
    rc, out, err = ckpt("doctor", NOCOLL)
    assert rc == 0 and "integrity\n  OK" in out, out + err
    # a rank file opens the directory's save too
    rc, out, err = ckpt("inspect", "--json", os.path.join(NOCOLL, "__1.metadata"))
    assert rc == 0 and len(json.loads(out)["tensors"]) == len(want_t), err
    from safetensors.torch import load_file
    conv = os.path.join(TMP, "nocoll.safetensors")
    rc, o, err = ckpt("convert", NOCOLL, conv)
    assert rc == 0, o + err
    got = load_file(conv)
    assert {k: (DTYPES[x.dtype], list(x.shape), sha256(x)) for k, x in got.items()} == want_t


def test_no_collectives_missing_rank_files():
    d = copy(NOCOLL, "nocoll_gap")
    os.rename(os.path.join(d, "__1.metadata"), os.path.join(d, "__2.metadata"))
    verify_fails(d, "__1.metadata", "missing", "use_collectives=False")
    d = copy(NOCOLL, "nocoll_no0")
    os.remove(os.path.join(d, "__0.metadata"))
    verify_fails(d, "__0.metadata", "missing", "rank 0")
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSCANNABLE" in out and "rank 0" in out, out + err
    # the last rank's file lost: its data file is named by no metadata, and
    # rank 0's chunks of w0 leave a gap (dcp_to_torch_save would hand back
    # uninitialised rows)
    d = copy(NOCOLL, "nocoll_last")
    os.remove(os.path.join(d, "__1.metadata"))
    verify_fails(d, "w0", "gap", "20 of its 35 elements")


def test_no_collectives_inconsistent_duplicates():
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex

    def as_tensor(m):  # a bytes item of rank 0 is a tensor in rank 1's file
        m.state_dict_metadata["meta.epoch"] = m.state_dict_metadata["plain"]
        m.storage_data[MetadataIndex("meta.epoch", torch.Size([0, 0]))] = \
            m.storage_data[MetadataIndex("plain", torch.Size([0, 0]))]
    for name, edit, needle in (
            ("dtype", lambda m: setattr(m.state_dict_metadata["rep"].properties, "dtype",
                                        torch.int32), "dtypes or sizes"),
            ("size", lambda m: setattr(m.state_dict_metadata["w0"], "size", torch.Size([8, 5])),
             "dtypes or sizes"),
            ("kind", as_tensor, "kind"),
            ("chunk", lambda m: m.state_dict_metadata["rep"].chunks.__setitem__(
                0, ChunkStorageMetadata(torch.Size([0]), torch.Size([9]))),
             "chunk sizes at the same offsets")):
        d = copy(NOCOLL, "nocoll_" + name)
        path = os.path.join(d, "__1.metadata")
        with open(path, "rb") as fh:
            meta = pickle.load(fh)
        edit(meta)
        with open(path, "wb") as fh:
            pickle.dump(meta, fh)
        out = verify_fails(d, "__1.metadata", "__0.metadata", "inconsistent duplicate entries")
        assert needle in out, (name, needle, out)


def test_metadata_next_to_rank_files():
    # DCP reads .metadata when there is one: rank files next to it are
    # ignored, which verify reports; opening a rank file explicitly reads
    # the rank files, and verify reports the .metadata DCP would read instead
    d = copy(NOCOLL_TWIN, "mixed")
    for r in (0, 1):
        shutil.copy(os.path.join(NOCOLL, f"__{r}.metadata"), d)
    assert tensors_and_values(d) == tensors_and_values(NOCOLL_TWIN)
    verify_fails(d, "__0.metadata is ignored", "use_collectives=False")
    d = copy(NOCOLL, "mixed_ranks")
    shutil.copy(os.path.join(NOCOLL_TWIN, ".metadata"), d)
    rc, out, err = ckpt("verify", os.path.join(d, "__0.metadata"))
    assert rc == 1 and ".metadata lies next to the rank metadata" in out, out + err
    # the directory is what DCP reads: .metadata, over the rank files' data
    verify_fails(d, "__0_0.distcp")


def test_hostile_rank_metadata_is_unsafe():
    d = copy(NOCOLL, "hostile_rank")
    with open(os.path.join(d, "__1.metadata"), "wb") as fh:
        pickle.dump(_System(), fh)
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSAFE" in out and "__1.metadata" in out and "posix.system" in out, \
        out + err
    rc, out, err = ckpt("inspect", d)
    assert rc == 1 and "__1.metadata" in err and "no DCP metadata class" in err, err


def test_hostile_bytes_item_of_another_rank_is_unsafe():
    """A bytes item every rank saved: the open view takes rank 0's, but the
    loader on rank 1 reads rank 1's copy, so scan covers every rank's."""
    from torch.distributed.checkpoint.metadata import MetadataIndex
    d = copy(NOCOLL, "hostile_rank_bytes")
    data = os.path.join(d, "__1_0.distcp")
    blob = io.BytesIO()
    torch.save(_System(), blob)
    at = os.path.getsize(data)
    with open(data, "ab") as fh:
        fh.write(blob.getvalue())
    path = os.path.join(d, "__1.metadata")
    with open(path, "rb") as fh:
        meta = pickle.load(fh)
    info = meta.storage_data[MetadataIndex("meta.tag")]
    info.offset, info.length = at, len(blob.getvalue())
    with open(path, "wb") as fh:
        pickle.dump(meta, fh)
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSAFE" in out and f"__1_0.distcp@{at}" in out and "posix.system" in out, \
        out + err


# ------------------------------------------------------------ Hugging Face layouts


def hf_view(d):
    """What HuggingFaceStorageReader assembles (every *.safetensors file of
    the directory, DCP_SHARDING_INFO's saved_offsets)."""
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys
    return _load_state_dict_from_keys(storage_reader=HuggingFaceStorageReader(d))


def test_hf_layouts_equal_hf_storage_reader():
    assert sorted(os.listdir(HF["dist"])) == [
        "shard-00001-model-00001-of-00001.safetensors",
        "shard-00002-model-00001-of-00001.safetensors"]
    for name, fmt in (("dist", "dcp"), ("cons/sharded", "dcp"), ("cons", "safetensors-sharded"),
                      ("rank0", "safetensors-sharded"), ("one", "safetensors-sharded")):
        d = HF[name]
        t, v, got_fmt = tensors_and_values(d)
        want_t, _ = expected(hf_view(d))
        assert got_fmt == fmt, (name, got_fmt)
        assert t == want_t and v == {}, (name, t, want_t)
        # and DCP's own view of the same state dict
        twin, _ = expected(torch_view(NOCOLL_TWIN))
        assert all(twin[k] == t[k] for k in t) and len(t) >= 4, name
        rc, out, err = ckpt("verify", d)
        assert rc == 0 and out.startswith("OK "), (name, out + err)
        rc, out, err = ckpt("doctor", d)
        assert rc == 0, (name, out + err)
    for name in ("dist", "cons/sharded"):
        rc, out, err = ckpt("scan", HF[name])
        assert rc == 0 and out.startswith("SAFE "), out + err
        w0 = chunk_of(HF[name], "w0")
        assert [(c["offsets"], c["sizes"]) for c in w0] == [([0, 0], [4, 5]), ([4, 0], [3, 5])], w0
    conv = os.path.join(TMP, "hf.pt")
    rc, o, err = ckpt("convert", HF["dist"], conv)
    assert rc == 0, o + err
    got = torch.load(conv, weights_only=True)
    want = hf_view(HF["dist"])
    assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)


def rewrite_safetensors(path, edit):
    """Rewrites a safetensors file with its tensors and __metadata__ passed
    through edit(tensors, metadata)."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(path, framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = f.metadata()
    edit(tensors, meta)
    save_file(tensors, path, metadata=meta)


def edit_sharding_info(path, edit):
    """Rewrites a shard with edit(info) applied to its DCP_SHARDING_INFO."""
    def go(tensors, meta):
        info = json.loads(meta["DCP_SHARDING_INFO"])
        edit(info)
        meta["DCP_SHARDING_INFO"] = json.dumps(info)
    rewrite_safetensors(path, go)


def test_hf_malformed():
    shards = sorted(os.listdir(HF["dist"]))
    # a rank's file lost: w0 has only rank 0's rows, size from them
    d = copy(HF["dist"], "hf_lost")
    os.remove(os.path.join(d, shards[1]))
    t, _, _ = tensors_and_values(d)
    assert t == expected(hf_view(d))[0], t  # w0 is [4, 5] for both
    # a stray copy of a shard: every chunk twice, and which copy the reader
    # takes depends on the listing order
    d = copy(HF["dist"], "hf_stray")
    shutil.copy(os.path.join(d, shards[0]), os.path.join(d, "copy.safetensors"))
    verify_fails(d, "copy.safetensors", "saved twice")
    # saved_offsets missing for a tensor (HuggingFaceStorageReader: KeyError)
    d = copy(HF["dist"], "hf_nokey")
    edit_sharding_info(os.path.join(d, shards[1]), lambda info: info.pop("w0"))
    verify_fails(d, "saved_offsets", "w0")
    # a chunk of another dtype than the rest of its tensor
    d = copy(HF["dist"], "hf_dtype")
    rewrite_safetensors(os.path.join(d, shards[1]),
                        lambda tensors, meta: tensors.__setitem__("w0", tensors["w0"].double()))
    verify_fails(d, "w0", "inconsistent duplicate entries")
    # rows past a gap: a shard moved down leaves rows no file holds
    d = copy(HF["dist"], "hf_gap")
    edit_sharding_info(os.path.join(d, shards[1]),
                       lambda info: info["w0"].__setitem__("saved_offsets", [5, 0]))
    verify_fails(d, "w0", "gap")


def test_hf_indexed_set_read_otherwise_by_hf_storage_reader():
    """An indexed set with DCP_SHARDING_INFO (rank 0's layout) is read by
    transformers through its index and by HuggingFaceStorageReader from
    every *.safetensors file: verify fails where the two differ."""
    d = copy(HF["rank0"], "hf_extra")
    shutil.copy(os.path.join(HF["dist"], "shard-00001-model-00001-of-00001.safetensors"),
                os.path.join(d, "extra.safetensors"))
    verify_fails(d, "extra.safetensors", "not in the index")
    d = copy(HF["rank0"], "hf_offsets")
    edit_sharding_info(os.path.join(d, "model-00001-of-00002.safetensors"),
                       lambda info: info["w0"].__setitem__("saved_offsets", [1, 0]))
    verify_fails(d, "w0", "saved_offsets other than 0")


# ------------------------------------------------------------ more DCP shapes


def test_zero_d_empty_nested_bytes_and_async():
    for name in ("plain", "async"):
        d = os.path.join(ODD, name)
        t, v, _ = tensors_and_values(d)
        want_t, want_v = expected(torch_view(d))
        assert t == want_t and v == want_v, (name, t, want_t, v, want_v)
    t, v, _ = tensors_and_values(os.path.join(ODD, "plain"))
    assert t["zero_d"][1] == [] and t["empty"][1] == [0, 4] and t["empty3"][1] == [2, 0, 3], t
    assert "nested.l.1.deep" in t and v["nested.l.2.1"] == "s", (t, v)
    out = os.path.join(TMP, "odd.pt")
    rc, o, err = ckpt("convert", os.path.join(ODD, "plain"), out)
    assert rc == 0, o + err
    oracle = os.path.join(TMP, "odd-oracle.pt")
    dcp_to_torch_save(os.path.join(ODD, "plain"), oracle)
    assert skeleton(torch.load(out, weights_only=False)) == skeleton(
        torch.load(oracle, weights_only=False))


def test_transform_descriptors_are_refused():
    d = os.path.join(ODD, "zlib")
    # bytes ckpt cannot undo are not damage: UNSUPPORTED, exit 1
    rc, out, err = ckpt("verify", d)
    assert rc == 1 and out.startswith("UNSUPPORTED ") and "transform_descriptors" in out \
        and "stream.zlib/1" in out, out + err
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSCANNABLE" in out and "stream.zlib/1" in out, out + err
    rc, out, err = ckpt("inspect", d)
    assert rc != 0 and "stream.zlib/1" in err, err
    # any value FileSystemReader takes as transforms (`descriptors or ()`),
    # not only a list: a bare str is refused too; an empty list is none
    for td, refused in (("stream.zstd/1", True), ([], False), (None, False)):
        d = copy(SINGLE, "td")
        meta = read_meta(d)
        for info in meta.storage_data.values():
            info.transform_descriptors = td
        write_meta(d, meta)
        rc, out, err = ckpt("verify", d)
        assert (rc == 1 and "transform_descriptors" in out) if refused else rc == 0, (td, out)

def test_rank_metadata_is_scanned():
    """torch.distributed.checkpoint.load falls back to "__RANK.metadata"
    (pickle.load) when .metadata fails to load: here its storage_meta is an
    int, which ckpt reads as data but torch's read_metadata cannot set a
    load_id on. The scan once looked at .metadata only and said SAFE."""
    d = copy(SINGLE, "rank_meta")
    good = read_meta(d)
    shutil.copy(os.path.join(d, ".metadata"), os.path.join(d, "__1.metadata"))
    rc, out, err = ckpt("scan", d)
    assert rc == 0 and "SAFE" in out, out + err  # a benign rank file is data
    good.storage_meta = 5
    write_meta(d, good)
    marker = os.path.join(TMP, "rank_meta.ran")
    with open(os.path.join(d, "__0.metadata"), "wb") as fh:
        pickle.dump(_Touch(marker), fh)
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSAFE" in out and "member __0.metadata" in out \
        and "posix.system" in out, out + err
    import logging
    import torch.distributed.checkpoint as dcp
    logging.disable(logging.WARNING)  # DCP logs both failed reads with tracebacks
    try:
        dcp.load({"w": torch.zeros(3)}, checkpoint_id=d)
    except BaseException as e:  # CheckpointException: os.system's result is no Metadata
        if isinstance(e, KeyboardInterrupt):
            raise
    finally:
        logging.disable(logging.NOTSET)
    assert os.path.exists(marker), "torch did not run the planted call: the case proves nothing"

def test_overlapping_slices_are_budgeted():
    """40 bytes items over one 64 KiB data file of stacked pickles, each
    running to the file's end: every slice was scanned to its end, so the
    cost grew as items x file size (minutes for a few thousand items over
    100 MB). Slices of one file are scanned up to twice its size (and
    1 MiB); past that the directory is unscannable."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, Metadata,
                                                       MetadataIndex)
    d = os.path.join(TMP, "overlap_budget")
    os.makedirs(d)
    size = 64 << 10
    with open(os.path.join(d, "__0_0.distcp"), "wb") as fh:
        fh.write(b"N." * (size // 2))
    names = ["k%02d" % i for i in range(40)]
    write_meta(d, Metadata(
        state_dict_metadata={n: BytesStorageMetadata() for n in names},
        storage_data={MetadataIndex(n): _StorageInfo("__0_0.distcp", 2 * i, size - 2 * i)
                      for i, n in enumerate(names)}))
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSCANNABLE" in out and "dcp-overlap" in out, out + err

def test_many_chunks_of_one_tensor():
    """A tensor of 60 000 one-element chunks (5 MB of .metadata, every
    chunk's storage_data entry naming one slice): each chunk's entry was
    found by a linear walk over the entries of its fqn, so the open cost
    chunks squared (20 000 chunks: a minute; 60 000: ten). Entries are
    sorted by (fqn, offset) and found by binary search."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, MetadataIndex,
                                                       TensorStorageMetadata)
    d = os.path.join(TMP, "many_chunks")
    dcp.save({"w": torch.ones(1)}, checkpoint_id=d)
    meta = read_meta(d)
    n = 60000
    info = meta.storage_data[MetadataIndex("w", torch.Size([0]))]
    props = meta.state_dict_metadata["w"].properties
    meta.state_dict_metadata["w"] = TensorStorageMetadata(
        properties=props, size=torch.Size([n]),
        chunks=[ChunkStorageMetadata(torch.Size([i]), torch.Size([1])) for i in range(n)])
    meta.storage_data = {MetadataIndex("w", torch.Size([i]), i): info for i in range(n)}
    write_meta(d, meta)
    rc, out, err = ckpt("scan", d)
    assert rc == 0 and "SAFE" in out, out + err
    rc, out, err = ckpt("verify", d)
    assert rc == 0 and "OK" in out and "1 key" in out, out + err


def test_many_chunks_along_a_later_dimension():
    """use_collectives=False rank files (__0, __1: the same 40 000 boxes,
    a replicated tensor) of an 8-dimensional tensor cut only along its
    last dimension. Merging looked for each box among the item's chunks
    one by one, and the overlap check swept along dimension 0, where every
    chunk starts at 0: both cost chunks squared (verify: 187 s). Boxes are
    found by hash, and the sweep runs along the dimension with the fewest
    candidate pairs (verify: 2 s)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, MetadataIndex,
                                                       TensorStorageMetadata)
    d = os.path.join(TMP, "many_chunks_late_dim")
    dcp.save({"w": torch.ones([1] * 8)}, checkpoint_id=d)
    meta = read_meta(d)
    n, zeros = 40000, [0] * 7
    info = meta.storage_data[MetadataIndex("w", torch.Size([0] * 8))]
    props = meta.state_dict_metadata["w"].properties
    meta.state_dict_metadata["w"] = TensorStorageMetadata(
        properties=props, size=torch.Size([1] * 7 + [n]),
        chunks=[ChunkStorageMetadata(torch.Size(zeros + [i]), torch.Size([1] * 8))
                for i in range(n)])
    meta.storage_data = {MetadataIndex("w", torch.Size(zeros + [i]), i): info for i in range(n)}
    for rank in (0, 1):
        with open(os.path.join(d, "__%d.metadata" % rank), "wb") as fh:
            pickle.dump(meta, fh)
    os.unlink(os.path.join(d, ".metadata"))
    rc, out, err = ckpt("verify", d)
    assert rc == 0 and "OK" in out and "1 key" in out, out + err


class _ListOffset(tuple):
    """An offset that pickles as builtins.list(items)."""
    def __reduce__(self):
        return (list, (tuple(self),))


def _unhashable_offset_case(nested):
    import re
    d = copy(SINGLE, "unhashable_offset_nested" if nested else "unhashable_offset")
    meta = read_meta(d)
    key = next(k for k in meta.storage_data if k.offset is not None and len(k.offset) == 1)
    info = meta.storage_data.pop(key)
    offset = _ListOffset(key.offset)
    object.__setattr__(key, "offset", ((offset,),) if nested else offset)
    meta.storage_data[key] = info
    raw = pickle.dumps(meta, protocol=2)
    put = rb"(?:q.|r....)"  # BINPUT or LONG_BINPUT
    raw, n = re.subn(rb"c__builtin__\nlist\n" + put + rb"K(.)\x85" + put + rb"\x85" + put + b"R" + put,
                     rb"]K\1a", raw, flags=re.S)
    assert n == 1
    with open(os.path.join(d, ".metadata"), "wb") as fh:
        fh.write(raw)
    try:
        pickle.loads(raw)
    except TypeError as e:
        assert "unhashable" in str(e), e
    else:
        raise AssertionError("pickle.loads took a list offset: the case proves nothing")
    rc, out, err = ckpt("verify", d)
    assert rc == 1 and "unhashable offset" in out + err, out + err


def test_unhashable_metadata_index_offset():
    """A storage_data key MetadataIndex whose offset is a list (EMPTY_LIST,
    APPEND: no global), or a tuple holding a tuple holding one: pickle.load
    fails hashing the key when it builds the dict, so DCP cannot load the
    directory; ckpt matched the list as the chunk's offsets and said OK
    (and took the nested one, which its own one-level rule missed)."""
    _unhashable_offset_case(False)
    _unhashable_offset_case(True)


def test_metadata_torch_cannot_read():
    """A .metadata whose storage_meta is an int loads in pickle.load, but
    DCP's read_metadata then sets storage_meta.load_id and raises, so torch
    uses __RANK.metadata (or fails): ckpt verify said OK and showed
    .metadata's state dict. storage_meta must be None or a StorageMeta."""
    d = copy(SINGLE, "storage_meta_int")
    meta = read_meta(d)
    meta.storage_meta = 5
    write_meta(d, meta)
    rc, out, err = ckpt("verify", d)
    assert rc == 1 and "storage_meta" in out + err, out + err

def test_unknown_layout_name():
    """One flipped
    byte in .metadata turns TensorProperties' layout argument
    torch.serialization._get_layout("torch.strided") into "torbh.strided";
    torch's read_metadata raises KeyError (then finds no __0.metadata and
    fails); ckpt verify said OK. 14 of 987 single-byte flips of a
    two-tensor .metadata were this class (135 others load the same in
    torch; 2 rename a key both read alike). _get_layout's argument must be
    a layout name torch knows."""
    d = copy(SINGLE, "bad_layout")
    path = os.path.join(d, ".metadata")
    with open(path, "rb") as fh:
        data = fh.read()
    assert b"\rtorch.strided" in data
    with open(path, "wb") as fh:
        fh.write(data.replace(b"\rtorch.strided", b"\rtorbh.strided"))
    rc, out, err = ckpt("verify", d)
    assert rc == 1 and "torbh.strided" in out + err, out + err

def _shift_zip(z, k):
    """The archive z with every offset moved by k: it is read behind k
    bytes of something else, as miniz reads offsets (absolute)."""
    z = bytearray(z)
    size, off = struct.unpack_from("<II", z, len(z) - 22 + 12)
    at = off
    while at < off + size:
        struct.pack_into("<I", z, at + 42, struct.unpack_from("<I", z, at + 42)[0] + k)
        nlen, elen, clen = struct.unpack_from("<HHH", z, at + 28)
        at += 46 + nlen + elen + clen
    struct.pack_into("<I", z, len(z) - 22 + 16, off + k)
    return bytes(z)


def test_bytes_items_at_one_offset_with_other_lengths():
    """Two bytes items start at one offset: "a" is a benign torch.save zip,
    "b" runs on past it to a second zip whose end record ends "b"'s slice.
    torch.load finds each slice's archive from the slice's end, so "b"
    runs posix.system (dcp_to_torch_save shows it); the scan once read
    slices by (file, offset) only and called the directory safe."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, Metadata,
                                                       MetadataIndex)
    import craft
    d = os.path.join(TMP, "bytes_same_offset")
    os.makedirs(d)
    buf = io.BytesIO()
    torch.save({"x": 1}, buf)
    benign = buf.getvalue()
    marker = os.path.join(TMP, "bytes_same_offset.ran")
    cmd = ("touch " + marker).encode()
    evil = b"\x80\x02cposix\nsystem\nX" + struct.pack("<I", len(cmd)) + cmd + b"\x85R."
    data = benign + _shift_zip(craft.zip_archive([("archive/data.pkl", evil, 0),
                                                  ("archive/byteorder", b"little", 0),
                                                  ("archive/version", b"3\n", 0)]), len(benign))
    with open(os.path.join(d, "__0_0.distcp"), "wb") as fh:
        fh.write(data)
    meta = Metadata(state_dict_metadata={"a": BytesStorageMetadata(), "b": BytesStorageMetadata()},
                    storage_data={MetadataIndex("a"): _StorageInfo("__0_0.distcp", 0, len(benign)),
                                  MetadataIndex("b"): _StorageInfo("__0_0.distcp", 0, len(data))})
    write_meta(d, meta)
    rc, out, err = ckpt("scan", d)
    assert rc == 1 and "UNSAFE" in out and "__0_0.distcp@0:archive/data.pkl" in out \
        and "posix.system" in out, out + err
    dcp_to_torch_save(d, os.path.join(TMP, "bytes_same_offset.pt"))
    assert os.path.exists(marker), "torch did not run the planted call: the case proves nothing"


if __name__ == "__main__":
    try:
        rc = suite.run_cases(globals(), __file__)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
