"""ckpt.load against PyTorch and the corpus ground truth: values, dtypes,
views of the mapping, storage sharing, copy-on-write, metadata, errors."""
import collections
import hashlib
import json
import os

import pytest

import ckpt

torch = pytest.importorskip("torch")


def torch_load(path):
    """torch.load of a file this test wrote (or the repository ships): the
    full unpickler on every torch version (>= 2.6 defaults to weights_only)."""
    return torch.load(path, weights_only=False)


def raw_bytes(t):
    """Logical contents as contiguous little-endian bytes (BOOL: 1 byte)."""
    if isinstance(t, ckpt.RawTensor):
        return t.data.numpy().tobytes()
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.view(torch.uint8).numpy().tobytes()


def flatten(obj, prefix=(), out=None):
    """Tensors by name, joined as expected.jsonl joins them."""
    out = {} if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, prefix + (str(k),), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flatten(v, prefix + (str(i),), out)
    elif isinstance(obj, (torch.Tensor, ckpt.RawTensor)):
        out[".".join(prefix)] = obj
    return out


def mapped_file(t):
    """The file whose mapping holds t's first byte (/proc/self/maps), or
    None for anonymous memory: proof that a tensor is a zero-copy view."""
    ptr = t.data_ptr()
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= ptr < hi:
                return parts[5].strip() if len(parts) == 6 else None
    return None


def corpus_records(corpus):
    with open(os.path.join(corpus, "expected.jsonl")) as fh:
        for line in fh:
            rec = json.loads(line)
            if not rec["file"].startswith("scan/") and rec["format"] != "not-a-checkpoint":
                yield rec


def test_corpus_ground_truth(corpus):
    """Every real checkpoint of the corpus: the same tensor names, shapes
    and SHA-256 of contents as PyTorch 1.13 computed."""
    checked = 0
    for rec in corpus_records(corpus):
        got = flatten(ckpt.load(os.path.join(corpus, rec["file"])))
        want = {t["name"]: t for t in rec["tensors"]}
        assert sorted(got) == sorted(want), rec["file"]
        for name, t in want.items():
            g = got[name]
            assert list(g.shape) == t["shape"], (rec["file"], name)
            assert hashlib.sha256(raw_bytes(g)).hexdigest() == t["sha256"], (rec["file"], name)
            checked += 1
    assert checked >= 400  # 412 tensors in 199 files when written


def test_sharded_set_is_one_dict_of_views(corpus):
    idx = os.path.join(corpus, "safetensors/fluxml/sharded/model.safetensors.index.json")
    sd = ckpt.load(idx, mmap=True)
    with open(idx) as fh:
        assert sorted(sd) == sorted(json.load(fh)["weight_map"])
    one = os.path.join(corpus, "safetensors/fluxml/non_sharded/model.safetensors")
    whole = ckpt.load(one)
    for k, v in sd.items():
        if isinstance(v, torch.Tensor) and v.numel():
            shard = json.load(open(idx))["weight_map"][k]
            assert mapped_file(v) == os.path.realpath(os.path.join(os.path.dirname(idx), shard)), k
        if k in whole:
            assert raw_bytes(v) == raw_bytes(whole[k]), k
    # the default reads every shard into private memory
    for k, v in ckpt.load(idx).items():
        if isinstance(v, torch.Tensor) and v.numel():
            assert raw_bytes(v) == raw_bytes(sd[k]) and mapped_file(v) != mapped_file(sd[k]), k


def test_torch_sharded_set_mmap_views(tmp_path):
    """mmap=True on a pytorch_model.bin.index.json set: every tensor is a
    view of its shard's mapping, as with a safetensors set or one .bin
    (the set was read into private memory before), views of one storage
    share it, and an in-place update leaves the shard as it was."""
    a = torch.arange(1024, dtype=torch.float32)
    shards = {"pytorch_model-00001-of-00002.bin": {"a": a, "tail": a[512:]},
              "pytorch_model-00002-of-00002.bin": {"w": torch.randn(8, 4).bfloat16(),
                                                    "n": torch.arange(5)}}
    weight_map = {}
    for name, sd in shards.items():
        torch.save(sd, tmp_path / name)
        weight_map.update({k: name for k in sd})
    (tmp_path / "pytorch_model.bin.index.json").write_text(
        json.dumps({"metadata": {"total_size": 4096 + 64 + 40}, "weight_map": weight_map}))
    before = {name: (tmp_path / name).read_bytes() for name in shards}
    sd = ckpt.load(tmp_path, mmap=True)
    assert sorted(sd) == sorted(weight_map)
    for k, v in sd.items():
        assert mapped_file(v) == str(tmp_path / weight_map[k]), k
        assert torch.equal(v, shards[weight_map[k]][k]), k
    assert sd["tail"].data_ptr() == sd["a"].data_ptr() + 512 * 4
    sd["a"].mul_(2)  # private pages: the file stays
    assert sd["tail"][0].item() == 1024.0
    assert {name: (tmp_path / name).read_bytes() for name in shards} == before
    # the default reads every shard into private memory
    for k, v in ckpt.load(tmp_path).items():
        assert mapped_file(v) != str(tmp_path / weight_map[k]), k


def test_matches_torch_load_on_every_dtype_and_value(tmp_path):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 4, generator=g)
    state = collections.OrderedDict([
        ("f32", base), ("f64", base.double()), ("f16", base.half()),
        ("bf16", base.bfloat16()), ("c64", torch.complex(base, -base)),
        ("c128", torch.complex(base.double(), base.double())),
        ("i64", torch.arange(-5, 7)), ("i32", torch.arange(3, dtype=torch.int32)),
        ("i16", torch.tensor([-2, 9], dtype=torch.int16)),
        ("i8", torch.tensor([-128, 127], dtype=torch.int8)),
        ("u8", torch.tensor([0, 255], dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, True])),
        ("scalar", torch.tensor(3.5)), ("empty", torch.zeros(0, 3)),
        ("transposed", base.t()), ("strided", base[::2, 1:3]),
        ("values", {"int": 7, "big": 2 ** 80, "neg": -(2 ** 70), "float": 0.1,
                    "str": "héllo", "bytes": b"\x00\xff", "none": None, "flag": True,
                    "tuple": (1, "a", (2.5,)), "list": [[], {}], "set": {1, 2}}),
    ])
    path = tmp_path / "all.pt"
    torch.save(state, path)
    want = torch_load(path)
    got = ckpt.load(path)
    assert list(got) == list(want)
    for k in want:
        if isinstance(want[k], torch.Tensor):
            assert got[k].dtype == want[k].dtype, k
            assert got[k].shape == want[k].shape, k
            assert raw_bytes(got[k]) == raw_bytes(want[k]), k
    assert got["values"] == want["values"]
    assert type(got["values"]["tuple"]) is tuple and type(got["values"]["set"]) is set


def test_mmap_tensors_are_copy_on_write_views(tmp_path):
    a = torch.arange(1024, dtype=torch.float32)
    path = tmp_path / "w.pt"
    torch.save({"a": a, "head": a[:16], "tail": a[512:]}, path)
    before = path.read_bytes()
    sd = ckpt.load(path, mmap=True)
    # one storage in the file, one memory after loading (like torch.load)
    assert mapped_file(sd["a"]) == str(path)
    assert sd["head"].data_ptr() == sd["a"].data_ptr()
    assert sd["tail"].data_ptr() == sd["a"].data_ptr() + 512 * 4
    sd["a"].mul_(2)  # an in-place update: private pages, no fault
    assert sd["tail"][0].item() == 1024.0
    assert path.read_bytes() == before
    assert torch.equal(ckpt.load(path)["a"], a)


@pytest.mark.parametrize("mmap", [False, True])
def test_strided_views_share_memory_like_torch(tmp_path, mmap):
    """Strided views (a transpose, overlapping as_strided, a column) of one
    storage share its memory after ckpt.load as after torch.load: with
    mmap=True the non-contiguous ones were private copies, so a write
    through one did not show in the others (torch.load(mmap=True): one
    memory)."""
    base = torch.arange(24.0)
    path = tmp_path / "views.pt"
    torch.save({"a": base, "t": base.view(4, 6).t(), "s": base.as_strided((3, 3), (2, 1), 1),
                "col": base.view(4, 6)[:, 1]}, path)
    want, got = torch_load(path), ckpt.load(path, mmap=mmap)
    for k in want:
        assert got[k].stride() == want[k].stride() and torch.equal(got[k], want[k]), k
    for sd in (want, got):
        sd["a"][7] = -1.0
        assert sd["t"][1, 1] == -1.0 and sd["s"][2, 2] == -1.0 and sd["col"][1] == -1.0
        assert len({(t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage())
                    .data_ptr() for t in sd.values()}) == 1
    if mmap:
        assert mapped_file(got["t"]) == str(path)


@pytest.mark.parametrize("mmap", [False, True])
def test_empty_tensors_keep_their_storage_and_offset(tmp_path, mmap):
    """An empty view keeps its place in the storage it shares, as torch.load
    gives it (it was a fresh empty tensor at offset 0); an empty tensor of
    an empty storage loads as one."""
    s = torch.arange(10.0)
    sd = {"mid": s[3:3], "col": s[5:5].view(0, 1), "view": s[2:4], "alone": torch.empty(0),
          "flags": torch.zeros(0, dtype=torch.bool), "bf": torch.ones(4, dtype=torch.bfloat16)[4:]}
    path = tmp_path / "empty.pt"
    torch.save(sd, path)
    want, got = torch_load(path), ckpt.load(path, mmap=mmap)
    for k in sd:
        w, g = want[k], got[k]
        assert (g.shape, g.dtype, g.stride(), g.storage_offset()) == \
            (w.shape, w.dtype, w.stride(), w.storage_offset()), k
        assert storage_bytes(g) == storage_bytes(w), k
    assert storage_of(got["mid"]).data_ptr() == storage_of(got["view"]).data_ptr()


class _Pairs(dict):
    """A dict pickled as dict() plus these (key, value) pairs, repeats and
    all, as a hostile file can hold them."""
    def __init__(self, pairs):
        super().__init__()
        self.pairs = pairs

    def __reduce__(self):
        return (dict, (), None, None, iter(self.pairs))


@pytest.mark.parametrize("mmap", [False, True])
@pytest.mark.parametrize("pairs", [
    [("w", 2), (b"w", 3)],  # two keys that flatten to one name "w"
    [(1, 2), (True, 3)],  # one key to Python: the first tensor is dropped
    [("w", 2), ("w", 3)],
    [("a", {"b": 2}), ("a.b", 3)],
])
def test_keys_that_share_a_name_or_a_hash(tmp_path, pairs, mmap):
    """Tensors a later equal key replaced, or whose flattened name a later
    tensor took, load as torch.load gives them. The second case corrupted
    the heap (a buffer freed before libckpt wrote it: malloc abort) and the
    first failed in setStorage (the shadowed tensor's storage had no id of
    its own, so it read another storage's bytes)."""
    def value(v):
        if isinstance(v, dict):
            return {k: value(x) for k, x in v.items()}
        return torch.arange(float(v)) + 10 * v
    path = tmp_path / "pairs.pt"
    torch.save(_Pairs([(k, value(v)) for k, v in pairs]), path)
    want, got = torch_load(path), ckpt.load(path, mmap=mmap)
    assert list(got) == list(want)
    for k in want:
        w, g = want[k], got[k]
        if isinstance(w, dict):
            w, g = w["b"], g["b"]
        assert torch.equal(g, w), k


def storage_of(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()  # torch 2 / 1


def storage_bytes(t):
    s = storage_of(t)
    return s.nbytes() if hasattr(s, "nbytes") else s.size() * t.element_size()


def test_safetensors_mmap_views_and_metadata(tmp_path):
    path = tmp_path / "m.safetensors"
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
                         "b": {"dtype": "BOOL", "shape": [3], "data_offsets": [8, 11]}}).encode()
    header += b" " * (-len(header) % 8)
    w = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.bfloat16)
    data = w.view(torch.int16).numpy().tobytes() + bytes([1, 0, 1])
    path.write_bytes(len(header).to_bytes(8, "little") + header + data)
    sd = ckpt.load(path, mmap=True)
    assert torch.equal(sd["w"], w) and mapped_file(sd["w"]) == str(path)
    assert mapped_file(sd["b"]) == str(path)
    assert sd["b"].tolist() == [True, False, True]
    assert ckpt.metadata(path) == {"format": "pt"}
    # the default copies: nothing is mapped from the file
    sd = ckpt.load(path)
    assert torch.equal(sd["w"], w) and mapped_file(sd["w"]) != str(path)
    assert sd["b"].tolist() == [True, False, True]


def test_opaque_objects_are_placeholders(tmp_path):
    import argparse
    path = tmp_path / "hp.pt"
    torch.save({"w": torch.ones(2), "hp": argparse.Namespace(lr=0.1)}, path)
    with pytest.raises(ckpt.UnsafeError) as exc:
        ckpt.load(path)
    assert exc.value.report.verdict == "review"  # a data-only class
    assert "argparse.Namespace" in exc.value.report.globals
    sd = ckpt.load(path, unsafe_ok=True)
    assert isinstance(sd["hp"], ckpt.Opaque) and sd["hp"].name == "argparse.Namespace"
    assert sd["hp"].state == {"lr": 0.1}
    assert "not constructed" in repr(sd["hp"])
    # an allowed global is accepted by the scan, still never constructed
    assert isinstance(ckpt.load(path, allow=["argparse.Namespace"])["hp"], ckpt.Opaque)


def test_errors_carry_code_file_member_offset(tmp_path, example_pt):
    with pytest.raises(ckpt.FileError) as exc:
        ckpt.load(tmp_path / "absent.pt")
    assert isinstance(exc.value, OSError) and exc.value.code == -1
    assert exc.value.name == "CKPT_E_IO"
    data = open(example_pt, "rb").read()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ckpt.Error) as exc:
        ckpt.load(cut)
    e = exc.value
    assert e.code in (-3, -4) and e.file == str(cut) and e.message
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes((40).to_bytes(8, "little") + b'{"w": {"dtype": "F32", "shape": [4]}}   ')
    with pytest.raises(ckpt.FormatError) as exc:
        ckpt.load(bad)
    assert exc.value.code == -4 and exc.value.offset is not None
    assert str(bad) in str(exc.value) and "CKPT_E_FORMAT" in str(exc.value)


def test_file_errors_are_the_oserrors_python_raises(tmp_path, example_pt):
    """A missing file is a FileNotFoundError (errno, filename set) and still
    a ckpt.FileError, as Python's open would raise it; a path through a
    file, NotADirectoryError. They were a bare OSError with errno None.
    Pickled and unpickled (multiprocessing), they stay so."""
    import errno
    import io
    import pickle
    absent = str(tmp_path / "absent.pt")
    for fn in (ckpt.load, ckpt.open, ckpt.scan, ckpt.verify):
        with pytest.raises(FileNotFoundError) as exc:
            fn(absent)
        e = exc.value
        assert isinstance(e, ckpt.FileError) and isinstance(e, ckpt.FileMissingError)
        assert (e.errno, e.filename, e.strerror) == (errno.ENOENT, absent, os.strerror(errno.ENOENT))
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is ckpt.FileMissingError and back.errno == errno.ENOENT
    with pytest.raises(NotADirectoryError) as exc:
        ckpt.load(os.path.join(example_pt, "x.pt"))
    assert isinstance(exc.value, ckpt.FileError) and exc.value.errno == errno.ENOTDIR
    # a failure that is no system call's: a FileError with no errno
    with pytest.raises(ckpt.FileError) as exc:
        ckpt.load(tmp_path)  # a folder without weights
    assert exc.value.errno is None and not isinstance(exc.value, FileNotFoundError)
    # file objects: named as not accepted (it was os.fspath's bare TypeError)
    with pytest.raises(TypeError) as exc:
        ckpt.load(io.BytesIO(open(example_pt, "rb").read()))
    assert isinstance(exc.value, ckpt.InvalidArgumentError)
    assert "ckpt.load takes a path (str, bytes or os.PathLike)" in str(exc.value)
    assert "not a _io.BytesIO object" in str(exc.value)
    with open(example_pt, "rb") as fh, pytest.raises(ckpt.PathTypeError) as exc:
        ckpt.load(fh)
    assert "open on %r: pass that path" % example_pt in str(exc.value)


def test_verify(tmp_path, example_pt):
    rep = ckpt.verify(example_pt)
    assert rep.ok and rep.format == "torch-zip" and rep.tensors == 16 and rep.members > 0
    assert rep.shards == 0
    sharded = tmp_path / "set" / "model.safetensors"
    sharded.parent.mkdir()
    ckpt.convert(example_pt, sharded, select=["model"], max_shard_size=2000)
    rep = ckpt.verify(sharded.parent)
    shards = len(list(sharded.parent.glob("*.safetensors")))
    assert rep.ok and rep.format == "safetensors-sharded" and shards > 1 and rep.shards == shards
    data = bytearray(open(example_pt, "rb").read())
    sd = torch_load(example_pt)
    needle = sd["model"]["fc1.weight"].numpy().tobytes()[:64]
    pos = bytes(data).index(needle)
    data[pos] ^= 0xFF
    bad = tmp_path / "flipped.pt"
    bad.write_bytes(bytes(data))
    rep = ckpt.verify(bad)
    assert not rep.ok and isinstance(rep.error, ckpt.ChecksumError)
    assert rep.error.member.endswith("data/%s" % rep.error.member.rsplit("/", 1)[-1])
    assert rep.error.member and rep.error.offset is not None
    with pytest.raises(ckpt.FileError):
        ckpt.verify(tmp_path / "absent.pt")


def test_verify_variant_and_hf_cache_snapshot(tmp_path, example_pt):
    """A folder of weights under a variant's names (save_pretrained(
    variant="fp16")) and a Hugging Face cache repository: verify reads them
    and names the variant and the snapshot (both were 'a directory without
    model weights', ckpt.FileError)."""
    folder = tmp_path / "fp16"
    folder.mkdir()
    ckpt.convert(example_pt, folder / "model.fp16.safetensors", select=["model"])
    rep = ckpt.verify(folder)
    assert rep.ok and (rep.variant, rep.snapshot) == ("fp16", None)
    repo = tmp_path / "models--org--name"
    rev = "0" * 39 + "1"
    for sub in ("blobs", "refs", "snapshots/" + rev):
        (repo / sub).mkdir(parents=True)
    (repo / "blobs" / "b1").write_bytes((folder / "model.fp16.safetensors").read_bytes())
    (repo / "snapshots" / rev / "model.safetensors").symlink_to("../../blobs/b1")
    (repo / "refs" / "main").write_text(rev)
    rep = ckpt.verify(repo)
    assert rep.ok and (rep.variant, rep.snapshot) == (None, rev)
    assert ckpt.verify(example_pt).variant is None


def test_verify_checksums(tmp_path, example_pt):
    """VerifyReport.checksums says what the bytes were checked against, as
    `ckpt verify --json` does (Python had no way to tell a structure-only
    OK of a safetensors file from a checked one)."""
    import struct
    assert ckpt.verify(example_pt).checksums == "crc32"
    ours = tmp_path / "ours.safetensors"
    ckpt.convert(example_pt, ours, select=["model"])
    assert ckpt.verify(ours).checksums == "digests"
    theirs = tmp_path / "theirs.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}).encode()
    theirs.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 12)
    rep = ckpt.verify(theirs)
    assert rep.ok and rep.checksums == "none"
    data = bytearray(open(example_pt, "rb").read())
    data[-30] ^= 0xFF  # the end of central directory
    bad = tmp_path / "bad.pt"
    bad.write_bytes(bytes(data))
    rep = ckpt.verify(bad)
    assert not rep.ok and rep.checksums == ("crc32" if rep.format else "none")


def cuda_saved(tmp_path):
    """A file as torch.save writes it on a GPU (every persistent id says
    'cuda:0'), made on any machine by rewriting a CPU save's data.pkl."""
    import zipfile
    src, path = tmp_path / "cpu.pt", tmp_path / "gpu.pt"
    torch.save({"w": torch.arange(6.0).reshape(2, 3), "b": torch.arange(3)}, src)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            zout.writestr(info.filename.replace("cpu/", "gpu/"), data)
    return path


def test_map_location(tmp_path):
    path = cuda_saved(tmp_path)
    want = torch_load(path) if torch.cuda.is_available() else \
        torch.load(path, map_location="cpu", weights_only=False)
    for where in (None, "cpu", torch.device("cpu"), {"cuda:0": "cpu"}):
        got = ckpt.load(path, map_location=where)
        assert sorted(got) == ["b", "w"]
        for k in got:
            assert got[k].device.type == "cpu", (where, k)
            assert torch.equal(got[k], want[k].cpu())
    if not torch.cuda.is_available():
        # a dict that leaves cuda:0 where it was saved: torch's rule, and
        # torch's own error on a machine without it
        with pytest.raises(ckpt.DeviceError, match="'cuda:0'"):
            ckpt.load(path, map_location={"cuda:1": "cpu"})


def test_unavailable_device_is_a_ckpt_error(tmp_path):
    """tryout F8: map_location="cuda" on a CPU-only torch raised a bare
    AssertionError ("Torch not compiled with CUDA enabled"). A device this
    torch cannot place tensors on is ckpt.DeviceError naming it: an
    InvalidArgumentError, and the RuntimeError torch.load raises (the
    oracle), before the file is read when map_location is one device."""
    path = tmp_path / "cpu.pt"
    torch.save({"w": torch.ones(2)}, path)
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    bad = ["bogus", "cuda:%d" % n, {"cpu": "cuda:%d" % n}]
    if not torch.cuda.is_available():
        bad += ["cuda", torch.device("cuda")]
    for where in bad:
        with pytest.raises(RuntimeError):
            torch.load(path, map_location=where)
        with pytest.raises(ckpt.DeviceError) as e:
            ckpt.load(path, map_location=where)
        assert isinstance(e.value, (ckpt.InvalidArgumentError, RuntimeError))
        assert str(e.value).startswith("%s: map_location " % path), str(e.value)
        name = where if isinstance(where, str) else str(where.get("cpu", where)) \
            if isinstance(where, dict) else where.type
        assert name in str(e.value), (where, str(e.value))
    with pytest.raises(ckpt.DeviceError, match="device 'bogus'"):
        ckpt.load(path, device="bogus")
    with pytest.raises(ckpt.DeviceError, match="device 'cuda:%d'" % n):
        ckpt.open(path, device="cuda:%d" % n)
    if not torch.cuda.is_available():
        with pytest.raises(ckpt.DeviceError, match="torch.cuda.is_available.. is False"):
            ckpt.load(path, map_location="cuda")


def test_device(tmp_path):
    # device= is map_location as one device (a name or a torch.device), as
    # torch.load(map_location=) puts them: a CUDA-saved file on the CPU,
    # a CPU-saved one on "meta"
    path = cuda_saved(tmp_path)
    want = torch.load(path, map_location="cpu", weights_only=False)
    for device in ("cpu", torch.device("cpu")):
        got = ckpt.load(path, device=device)
        assert sorted(got) == ["b", "w"]
        for k in got:
            assert got[k].device == torch.device("cpu"), (device, k)
            assert torch.equal(got[k], want[k])
    cpu = tmp_path / "cpu.pt"
    for device in ("meta", torch.device("meta")):
        got = ckpt.load(cpu, device=device)
        want = torch.load(cpu, map_location=device, weights_only=False)
        for k in want:
            assert got[k].device == want[k].device == torch.device("meta"), (device, k)
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
    # one of the two, and device is one device
    for kw in ({"device": "cpu", "map_location": "cpu"},
               {"device": "meta", "map_location": {"cpu": "meta"}},
               {"device": {"cpu": "meta"}}):
        with pytest.raises(ckpt.InvalidArgumentError):
            ckpt.load(cpu, **kw)


def test_load_types_kept_when_moved(tmp_path):
    # nn.Parameter and requires_grad come back as torch.load gives them,
    # also moved by map_location (leaves on the target device)
    path = tmp_path / "p.pt"
    torch.save({"p": torch.nn.Parameter(torch.ones(2)),
                "q": torch.nn.Parameter(torch.ones(2), requires_grad=False),
                "t": torch.ones(2, requires_grad=True), "u": torch.ones(2)}, path)
    for where in (None, "meta", {"cpu": "meta"}):
        got = ckpt.load(path, map_location=where)
        want = torch.load(path, map_location=where)
        for k in want:
            assert type(got[k]) is type(want[k]), (where, k)
            assert got[k].requires_grad == want[k].requires_grad, (where, k)
            assert got[k].is_leaf and got[k].device == want[k].device, (where, k)


class _Storage:
    """Stands for a legacy storage (or a view of one) in the pickle."""

    def __init__(self, pid):
        self.pid = pid


class _Tensor:
    def __init__(self, storage, offset, size):
        self.args = (storage, offset, (size,), (1,), False, collections.OrderedDict())

    def __reduce__(self):
        return torch._utils._rebuild_tensor_v2, self.args


def _legacy_with_view(path):
    """A pre-1.6 torch.save file whose tensor "b" lies in storage view "1"
    (elements 2..3 of root storage "0", which tensor "a" uses whole)."""
    import io
    import pickle
    import struct

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return obj.pid if isinstance(obj, _Storage) else None

    root = _Storage(("storage", torch.FloatStorage, "0", "cpu", 4, None))
    view = _Storage(("storage", torch.FloatStorage, "0", "cpu", 4, ("1", 2, 2)))
    out = io.BytesIO()
    for obj in (0x1950a86a20f9469cfc6c, 1001,
                {"protocol_version": 1001, "little_endian": True,
                 "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(obj, out, protocol=2)
    Pickler(out, protocol=2).dump({"a": _Tensor(root, 0, 4), "b": _Tensor(view, 0, 2)})
    pickle.dump(["0"], out, protocol=2)
    out.write(struct.pack("<q4f", 4, 1.0, 2.0, 3.0, 4.0))
    with open(path, "wb") as fh:
        fh.write(out.getvalue())


def test_legacy_storage_views_share_memory(tmp_path):
    """torch.load makes a legacy storage view a slice of its root storage;
    ckpt.load's tensors share memory the same way."""
    path = tmp_path / "views.pt"
    _legacy_with_view(path)
    want = torch_load(path)
    assert want["b"].tolist() == [3.0, 4.0]
    want["a"][2] = 30.0
    assert want["b"][0] == 30.0  # torch: one memory
    for mmap in (False, True):
        got = ckpt.load(path, mmap=mmap)
        assert got["a"].tolist() == [1.0, 2.0, 3.0, 4.0] and got["b"].tolist() == [3.0, 4.0]
        got["a"][2] = 30.0
        assert got["b"][0] == 30.0, "mmap=%s" % mmap


def count_lib_calls(monkeypatch):
    """A Counter of calls into libckpt by function name, from now on: every
    prototyped function of the library is replaced by a counting wrapper."""
    from ckpt import _lib
    calls = collections.Counter()
    for name, _, _ in _lib._PROTOS:
        fn = getattr(_lib.lib, name)

        def counted(*args, _fn=fn, _name=name):
            calls[_name] += 1
            return _fn(*args)
        monkeypatch.setattr(_lib.lib, name, counted)
    return calls


def test_library_calls_per_load_do_not_grow_with_tensors(tmp_path, monkeypatch):
    """One call per file, not several per tensor: loading 8 or 400 tensors
    (views of shared storages, bools, a tensor that is not its whole
    storage) makes the same calls into libckpt, in every mode."""
    from ckpt import _load

    def state(n):
        base = torch.arange(4 * n, dtype=torch.float32)
        sd = collections.OrderedDict()
        for i in range(n):
            sd["w%d" % i] = torch.full((2, 3), float(i))
            sd["v%d" % i] = base[4 * i:4 * i + 2]  # a view of one shared storage
            sd["b%d" % i] = torch.tensor([True, False])
        sd["meta"] = {"step": 7, "names": ["a", "b"], "lr": 0.5}
        return sd

    loads = {"default": lambda p: ckpt.load(p),
             "mmap": lambda p: ckpt.load(p, mmap=True),
             "map_location": lambda p: ckpt.load(p, map_location={"cuda:0": "cpu"})}
    for ext in (".pt", ".safetensors"):
        for mode, load in loads.items():
            seen = []
            for n in (8, 400):
                path = str(tmp_path / ("s%d%s" % (n, ext)))
                if not os.path.exists(path):
                    ckpt.save(state(n), path)
                _load._dtype_cache.clear()  # the dtypes' names, looked up once per process
                with monkeypatch.context() as m:
                    calls = count_lib_calls(m)
                    got = load(path)
                assert torch.equal(got["w%d" % (n - 1)], torch.full((2, 3), float(n - 1)))
                assert torch.equal(got["v1"], torch.tensor([4.0, 5.0]))
                assert got["b0"].tolist() == [True, False]
                seen.append(dict(calls))
            assert seen[0] == seen[1], (ext, mode, seen)
            assert sum(seen[1].values()) < 40, (ext, mode, seen[1])


class _Shell:
    """Pickled as a call of os.system (torch.save writes it; nothing runs)."""
    def __reduce__(self):
        return os.system, ("true",)


def test_load_scans_what_it_opened(tmp_path, monkeypatch):
    """ckpt.load scans the file it has opened (ckpt_scan_file), in both
    modes: a safetensors header, a torch zip's directory are read once.
    The verdict is the one ckpt.scan of the path gives: an unsafe torch zip
    is still refused, with the same findings."""
    scans = ("ckpt_scan", "ckpt_scan_memory", "ckpt_scan_file")
    for ext in (".safetensors", ".pt"):
        path = str(tmp_path / ("s" + ext))
        ckpt.save({"w": torch.ones(2), "x": torch.zeros(3)}, path)
        for mmap in (False, True):
            with monkeypatch.context() as m:
                calls = count_lib_calls(m)
                got = ckpt.load(path, mmap=mmap)
            assert torch.equal(got["w"], torch.ones(2)) and torch.equal(got["x"], torch.zeros(3))
            assert {k: calls[k] for k in scans if calls[k]} == {"ckpt_scan_file": 1}, \
                (ext, mmap, dict(calls))
            assert calls["ckpt_open"] + calls["ckpt_open_memory"] == 1, (ext, mmap, dict(calls))
    path = str(tmp_path / "shell.pt")
    torch.save({"w": torch.ones(2), "x": _Shell()}, path)
    want = ckpt.scan(path)
    assert want.verdict == "unsafe" and "posix.system" in want.globals
    for mmap in (False, True):
        with monkeypatch.context() as m:
            calls = count_lib_calls(m)
            with pytest.raises(ckpt.UnsafeError) as exc:
                ckpt.load(path, mmap=mmap)
        assert {k: calls[k] for k in scans if calls[k]} == {"ckpt_scan_file": 1}, \
            (mmap, dict(calls))
        got = exc.value.report
        assert (got.verdict, got.globals, got.findings) == \
            (want.verdict, want.globals, want.findings), mmap
        assert isinstance(ckpt.load(path, mmap=mmap, unsafe_ok=True)["x"], ckpt.Opaque)


def test_unsafe_shard_is_unsafe_through_the_directory_or_its_index(tmp_path):
    """ckpt.load(DIR) scans the file ckpt_open reads there before opening
    it, as ckpt.load(INDEX) does: the shard's os.system is UnsafeError
    naming the shard both ways (it was FormatError through the directory)."""
    names = ["pytorch_model-0000%d-of-00002.bin" % i for i in (1, 2)]
    torch.save({"w": torch.ones(2)}, tmp_path / names[0])
    torch.save({"v": torch.ones(2), "x": _Shell()}, tmp_path / names[1])
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": {"w": names[0], "v": names[1]}}))
    got = []
    for path in (tmp_path, index):
        with pytest.raises(ckpt.UnsafeError) as exc:
            ckpt.load(path)
        assert names[1] in str(exc.value) and exc.value.file == str(index), path
        assert exc.value.report.verdict == "unsafe"
        got.append((str(exc.value), exc.value.report.globals))
    assert got[0] == got[1]


def test_library_calls_per_load_do_not_grow_with_typed_values(tmp_path, monkeypatch):
    """torch.save's types (nn.Parameter, requires_grad, numpy arrays and
    scalars, frozensets, a state dict's OrderedDict and _metadata) come
    from the same one table: 8 or 400 of each make the same calls."""
    import numpy as np
    from ckpt import _load
    seen = []
    for n in (8, 400):
        sd = collections.OrderedDict()
        for i in range(n):
            sd["p%d" % i] = torch.nn.Parameter(torch.full((2,), float(i)))
            sd["g%d" % i] = torch.ones(2, requires_grad=True)
            sd["a%d" % i] = np.arange(3, dtype=np.int16) + i
            sd["s%d" % i] = np.float32(i)
            sd["f%d" % i] = frozenset({i})
        sd._metadata = collections.OrderedDict({"": {"version": 1}})
        path = str(tmp_path / ("t%d.pt" % n))
        torch.save(sd, path)
        want = torch.load(path, weights_only=False)
        _load._dtype_cache.clear()
        _load._numpy_dtype_cache.clear()
        with monkeypatch.context() as m:
            calls = count_lib_calls(m)
            got = ckpt.load(path, unsafe_ok=True)
        assert type(got) is collections.OrderedDict and got._metadata == want._metadata
        for k, v in want.items():
            assert type(got[k]) is type(v), k
            if isinstance(v, torch.Tensor):
                assert torch.equal(got[k], v) and got[k].requires_grad == v.requires_grad, k
            elif isinstance(v, np.ndarray):
                assert got[k].dtype == v.dtype and (got[k] == v).all(), k
            else:
                assert got[k] == v, k
        seen.append(dict(calls))
    assert seen[0] == seen[1], seen


def test_load_and_convert_keep_torch_device_size_and_bytearray(tmp_path):
    """torch.load gives back a torch.device, a torch.Size and a bytearray
    (were a str 'cuda:1', a tuple and bytes): so do ckpt.load of the file
    and of what ckpt.convert writes from it (.pt, .safetensors, DCP), and
    torch.load of the converted .pt, with weights_only=True too."""
    obj = {"dev": torch.device("cuda", 1), "cpu": torch.device("cpu"),
           "size": torch.Size([2, 3]), "size0": torch.Size([]),
           "ba": bytearray(b"\x00\xffa"), "ba0": bytearray(), "b": b"xy", "t": (2, 3),
           "s": "cuda:1", "w": torch.ones(2)}
    src = str(tmp_path / "a.pt")
    torch.save(obj, src)
    want = torch_load(src)
    assert [type(want[k]) for k in ("dev", "size", "ba", "b", "t", "s")] == \
        [torch.device, torch.Size, bytearray, bytes, tuple, str]

    def same(got, where):
        for k, v in want.items():
            assert type(got[k]) is type(v), (where, k, type(got[k]))
            assert torch.equal(got[k], v) if k == "w" else got[k] == v, (where, k, got[k])

    same(ckpt.load(src), "ckpt.load")
    outs = ["b.pt", "b.safetensors"]
    if hasattr(torch, "distributed") and torch.__version__ >= "2":
        outs.append("b.dcp")
    for name in outs:
        dst = str(tmp_path / name)
        ckpt.convert(src, dst)
        same(ckpt.load(dst), "ckpt.load of " + name)
    same(torch_load(str(tmp_path / "b.pt")), "torch.load of b.pt")
    if int(torch.__version__.split(".")[0]) >= 2:  # 1.13 refuses device and bytearray
        same(torch.load(str(tmp_path / "b.pt"), weights_only=True), "weights_only")


@pytest.mark.parametrize("ext", [".pt", ".safetensors"])
def test_save_keeps_torch_device_size_and_bytearray(tmp_path, ext):
    """ckpt.save of a torch.device, torch.Size and bytearray (the device
    was refused, the others saved as a tuple and bytes): ckpt.load gives
    them back as they were, and so does torch.load of the .pt."""
    obj = {"dev": torch.device("cuda", 1), "size": torch.Size([2, 3]),
           "ba": bytearray(b"\x00\xff"), "b": b"x", "t": (2, 3), "w": torch.ones(2)}
    path = str(tmp_path / ("s" + ext))
    ckpt.save(obj, path)
    loads = [ckpt.load(path)] + ([torch_load(path)] if ext == ".pt" else [])
    for got in loads:
        assert [type(got[k]) for k in obj] == [type(v) for v in obj.values()]
        assert {k: v for k, v in got.items() if k != "w"} == \
            {k: v for k, v in obj.items() if k != "w"}


def weights_only_outcome(path):
    """torch.load(path, weights_only=True): the value, or the error's type."""
    try:
        return torch.load(path, weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError (1.13: RuntimeError around it)
        return type(exc)


@pytest.mark.parametrize("ext", [".pt", ".safetensors"])
def test_save_writes_sets_as_torch_save_does(tmp_path, ext):
    """ckpt.save of sets and frozensets (were refused): ckpt.load and
    ckpt.convert give them back; the .pt loads in torch.load as torch.save's
    does, also with weights_only=True: a set where the torch's allowlist has
    builtins.set (2.13 has, 1.13 refuses), a frozenset nowhere."""
    obj = {"s": {1, "a", (2, 3), frozenset({4})}, "f": frozenset({1.5}), "e": set(),
           "w": torch.ones(2)}
    path = str(tmp_path / ("s" + ext))
    ckpt.save(obj, path)
    other = str(tmp_path / ("c.safetensors" if ext == ".pt" else "c.pt"))
    ckpt.convert(path, other)
    loads = [ckpt.load(path), ckpt.load(other)] + [torch_load(p) for p in (path, other)
                                                   if p.endswith(".pt")]
    for got in loads:
        assert [type(got[k]) for k in obj] == [set, frozenset, set, torch.Tensor]
        assert {k: v for k, v in got.items() if k != "w"} == \
            {k: v for k, v in obj.items() if k != "w"}
    if ext == ".pt":
        from torch import _weights_only_unpickler as wo
        allowed = "builtins.set" in wo._get_allowed_globals()
        for value in ({"s": {1, 2}}, {"f": frozenset({1})}):
            mine, theirs = str(tmp_path / "mine.pt"), str(tmp_path / "theirs.pt")
            ckpt.save(value, mine)
            torch.save(value, theirs)
            got = weights_only_outcome(mine)
            assert got == weights_only_outcome(theirs)
            assert (got == value) == (allowed and "s" in value), (value, got)


@pytest.mark.parametrize("ext", [".pt", ".safetensors"])
def test_save_keeps_shared_objects_one_object(tmp_path, ext):
    """A bytearray (or list, dict, set, tuple) reached twice is one object
    in torch.load, through pickle's memo: so in ckpt.load of what ckpt.save
    and ckpt.convert write (the bytearray came back as two), and in
    torch.load of ckpt.save's .pt."""
    ba, lst, dct, st, tup = bytearray(b"\x00x"), [1], {"k": 2}, {3}, (4, [5])
    obj = {"b1": ba, "b2": [ba], "l1": lst, "l2": lst, "d1": dct, "d2": dct,
           "s1": st, "s2": st, "t1": tup, "t2": tup, "w": torch.ones(1)}
    names = ("b", "l", "d", "s", "t")

    def shared(got):
        return [got[n + "1"] is (got[n + "2"][0] if n == "b" else got[n + "2"]) for n in names]

    src = str(tmp_path / "torch.pt")
    torch.save(obj, src)
    assert shared(torch_load(src)) == [True] * 5
    assert shared(ckpt.load(src)) == [True] * 5
    path, conv = str(tmp_path / ("s" + ext)), str(tmp_path / ("c" + ext))
    ckpt.save(obj, path)
    ckpt.convert(src, conv)
    for p in (path, conv):
        got = ckpt.load(p)
        assert shared(got) == [True] * 5, p
        assert got["b1"] == ba and type(got["b1"]) is bytearray
        if ext == ".pt":
            assert shared(torch_load(p)) == [True] * 5, p


@pytest.mark.parametrize("ext", [".pt", ".safetensors"])
def test_convert_select_model_gives_the_state_dict(tmp_path, ext):
    """convert(select=["model"]) of a training checkpoint writes what
    torch.load(src)["model"] is: an OrderedDict with its _metadata, keys
    without the "model." prefix (it kept them: load_state_dict refused the
    file), so that a fresh module loads it strictly."""
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.Adam(net.parameters())
    net(torch.ones(2, 3)).sum().backward()
    opt.step()
    src, dst = str(tmp_path / "train.pt"), str(tmp_path / ("model" + ext))
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": 1}, src)
    ckpt.convert(src, dst, select=["model"])
    want, got = torch_load(src)["model"], ckpt.load(dst)
    assert type(got) is collections.OrderedDict and list(got) == list(want)
    assert got._metadata == want._metadata
    assert all(torch.equal(got[k], want[k]) for k in want)
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    fresh.load_state_dict(torch_load(dst) if ext == ".pt" else got)
    assert torch.equal(fresh[1].running_mean, net[1].running_mean)


def test_load_refuses_a_torch_size_of_a_str(tmp_path):
    """torch.Size(('a',)) raises TypeError in torch.load: ckpt.load says the
    pickle is not data it can give back, naming the item."""
    path = tmp_path / "s.pkl"
    path.write_bytes(b"\x80\x02ctorch\nSize\nX\x01\x00\x00\x00a\x85\x85R.")
    with pytest.raises(TypeError):
        torch_load(str(path))
    with pytest.raises(ckpt.errors.FormatError, match="torch.Size: item 0 is a str, not an int"):
        ckpt.load(str(path))


def test_dcp_reachable_after_import_ckpt():
    """`import ckpt` then `ckpt.dcp.load(path)`, as the README writes it
    (was AttributeError: ckpt.dcp needed its own import); `import ckpt`
    alone imports no torch."""
    pytest.importorskip("torch.distributed.checkpoint")  # torch >= 2.0
    import subprocess
    import sys
    code = ("import sys, ckpt; assert 'torch' not in sys.modules; "
            "print(ckpt.dcp.Writer.__name__, ckpt.dcp.load.__name__, 'dcp' in dir(ckpt))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Writer", "load", "True"]
