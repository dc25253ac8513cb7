"""Every dtype torch.save writes and every dtype safetensors' torch loader
reads, through ckpt: ckpt.load, ckpt.save, `ckpt inspect` and `ckpt
convert` give torch's dtype, shape and bytes, or refuse with a message.

Found by comparing with torch 2.13 / safetensors 0.8: torch.bits8 came back
as uint8, bits1x8/2x4/4x2 and float4_e2m1fn_x2 in a torch zip were refused,
and safetensors F4 came back as a RawTensor where safe_open gives
float4_e2m1fn_x2 (two F4 values a byte, the last dimension halved)."""
import json
import os
import struct
import subprocess

import pytest

import ckpt

torch = pytest.importorskip("torch")
if not hasattr(torch, "float4_e2m1fn_x2"):
    pytest.skip("torch %s has no float4_e2m1fn_x2" % torch.__version__, allow_module_level=True)

CKPT = os.environ.get("CKPT_BIN", "ckpt")

# torch dtype -> ckpt's name for it
NAMES = {
    "bits8": "BITS8", "bits16": "BITS16", "bits1x8": "BITS1X8", "bits2x4": "BITS2X4",
    "bits4x2": "BITS4X2", "float4_e2m1fn_x2": "F4_X2", "float8_e8m0fnu": "F8_E8M0",
    "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ", "uint16": "U16",
    "uint32": "U32", "uint64": "U64", "complex32": "C32",
}


def sample(name):
    """A 2-d tensor of the dtype with distinct bytes 1, 2, 3..."""
    dt = getattr(torch, name)
    raw = torch.arange(1, 1 + 4 * dt.itemsize, dtype=torch.uint8)
    return raw.view(dt).reshape(2, -1)


def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8).tolist()


def run(*argv):
    return subprocess.run([CKPT] + [str(a) for a in argv], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def same(a, b):
    assert isinstance(b, torch.Tensor), b
    assert (b.dtype, b.shape) == (a.dtype, a.shape)
    assert raw(b) == raw(a)


@pytest.mark.parametrize("name", sorted(NAMES))
def test_torch_zip_dtype(tmp_path, name):
    t = sample(name)
    path = tmp_path / "x.pt"
    torch.save({"x": t}, path)
    same(torch.load(path)["x"], t)
    same(ckpt.load(path)["x"], t)
    same(ckpt.load(path, mmap=True)["x"], t)
    r = run("inspect", "--json", path)
    assert r.returncode == 0, r.stderr
    assert [x["dtype"] for x in json.loads(r.stdout)["tensors"]] == [NAMES[name]]
    out = tmp_path / "w.pt"  # ckpt.save writes what torch.load reads back
    ckpt.save({"x": t}, out)
    same(torch.load(out)["x"], t)


def write_f4(path, shape, nbytes):
    head = json.dumps({"x": {"dtype": "F4", "shape": shape,
                             "data_offsets": [0, nbytes]}}).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + bytes(range(1, nbytes + 1)))


def test_safetensors_f4(tmp_path):
    from safetensors import safe_open
    path = tmp_path / "f4.safetensors"
    write_f4(path, [2, 6], 6)
    with safe_open(str(path), "pt") as f:
        want = f.get_tensor("x")
    assert (want.dtype, tuple(want.shape)) == (torch.float4_e2m1fn_x2, (2, 3))
    same(ckpt.load(path)["x"], want)
    same(ckpt.load(path, mmap=True)["x"], want)


def test_safetensors_f4_odd_last_dim(tmp_path):
    from safetensors import safe_open
    path = tmp_path / "f4.safetensors"
    write_f4(path, [6, 1], 3)
    with pytest.raises(Exception, match="divisible by 2"):
        with safe_open(str(path), "pt") as f:
            f.get_tensor("x")
    with pytest.raises(ckpt.UnsupportedError, match="last dimension must be even"):
        ckpt.load(path)


def test_convert_f4_x2_both_ways(tmp_path):
    from safetensors.torch import load_file, save_file
    t = sample("float4_e2m1fn_x2")
    pt, st, back = tmp_path / "x.pt", tmp_path / "x.safetensors", tmp_path / "back.pt"
    torch.save({"x": t}, pt)
    r = run("convert", pt, st)
    assert r.returncode == 0, r.stderr
    same(load_file(str(st))["x"], t)  # F4 with the last dimension doubled
    hdr = json.loads(st.read_bytes()[8:8 + struct.unpack("<Q", st.read_bytes()[:8])[0]])
    assert (hdr["x"]["dtype"], hdr["x"]["shape"]) == ("F4", [2, 4])
    same(ckpt.load(st)["x"], t)
    r = run("convert", st, back)
    assert r.returncode == 0, r.stderr
    same(torch.load(back)["x"], t)
    theirs = tmp_path / "theirs.safetensors"  # safetensors' own F4 file
    save_file({"x": t}, str(theirs))
    same(ckpt.load(theirs)["x"], t)


@pytest.mark.parametrize("name", ["bits8", "bits16", "bits1x8"])
def test_convert_bits_to_safetensors_refused(tmp_path, name):
    pt = tmp_path / "x.pt"
    torch.save({"x": sample(name)}, pt)
    r = run("convert", pt, tmp_path / "x.safetensors")
    assert r.returncode != 0
    assert "dtype %s has no safetensors equivalent" % NAMES[name] in r.stderr
    assert not (tmp_path / "x.safetensors").exists()


def deflate_records(src, dst):
    """src rewritten with its storage records deflated (torch.save stores
    them): torch.load inflates them, torch.load(mmap=True) maps the
    compressed bytes as the tensor."""
    import zipfile
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w") as zo:
        for info in zi.infolist():
            method = zipfile.ZIP_DEFLATED if "/data/" in info.filename else zipfile.ZIP_STORED
            zo.writestr(info.filename, zi.read(info.filename), compress_type=method)


def test_deflated_record_is_a_finding(tmp_path):
    plain, path = tmp_path / "plain.pt", tmp_path / "defl.pt"
    want = torch.zeros(64)
    torch.save({"w": want}, plain)
    deflate_records(plain, path)
    # the two loaders disagree: that is the finding
    assert torch.equal(torch.load(path)["w"], want)
    assert not torch.equal(torch.load(path, mmap=True)["w"], want)
    finding = "storage record is compressed (method 8"
    for cmd in ("verify", "inspect", "doctor"):
        r = run(cmd, path)
        assert r.returncode == 1, (cmd, r.stdout, r.stderr)
        assert finding in r.stdout + r.stderr, cmd
        assert "plain/data/0" in r.stdout + r.stderr, cmd
        assert "mmap=True" in r.stdout + r.stderr, cmd
    assert run("verify", plain).returncode == 0
    assert torch.equal(ckpt.load(path)["w"], want)  # plain load: inflated, as torch.load
    with pytest.raises(ckpt.MismatchError, match=r"mmap=True.*plain/data/0"):
        ckpt.load(path, mmap=True)
    assert torch.equal(ckpt.load(plain, mmap=True)["w"], want)


def rekey(src, dst, old, new):
    """src with the pickle bytes `old` (a persistent id's key) made `new`."""
    import zipfile
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w") as zo:
        for info in zi.infolist():
            data = zi.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                assert data.count(old) == 1
                data = data.replace(old, new)
            zo.writestr(info.filename, data)


# key "0" as torch.save pickles it (BINUNICODE), and other keys for it
STR_KEY0 = b"X\x01\x00\x00\x000"


@pytest.mark.parametrize("tag,new,accepted", [
    ("int", b"K\x00", True),                 # BININT1 0: torch reads data/0
    ("long", b"\x8a\x01\x00", True),         # LONG1 0
    ("bool", b"\x89", False),                # False: torch looks for data/False
    ("float", b"G" + bytes(8), False),       # 0.0: data/0.0
    ("neg", b"J\xff\xff\xff\xff", False),    # -1: data/-1 is missing
])
def test_int_storage_key(tmp_path, tag, new, accepted):
    plain, path = tmp_path / "p.pt", tmp_path / "k.pt"
    want = torch.tensor([1.0, 2.0])
    torch.save({"w": want}, plain)
    rekey(plain, path, STR_KEY0, new)
    try:
        got = torch.load(path)["w"]
    except RuntimeError:
        got = None
    assert (got is not None) == accepted
    r = run("verify", path)
    assert r.returncode == (0 if accepted else 1), r.stdout
    if accepted:
        assert torch.equal(got, want)
        assert torch.equal(ckpt.load(path)["w"], want)


def test_str_and_int_keys_refused(tmp_path):
    """torch loads "0" and 0 as two storages of data/0 (loaded_storages is
    keyed by the key itself); ckpt refuses rather than share one."""
    path = tmp_path / "mix.pt"
    torch.save({"a": torch.tensor([1.0]), "b": torch.tensor([2.0])}, tmp_path / "p.pt")
    rekey(tmp_path / "p.pt", path, b"X\x01\x00\x00\x001", b"K\x00")
    a, b = torch.load(path).values()
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    r = run("verify", path)
    assert r.returncode == 1 and "both str and int storage keys" in r.stdout, r.stdout


def test_convert_safetensors_f4_to_torch(tmp_path):
    """F4 is written to a torch zip as safetensors' torch loader gives it:
    float4_e2m1fn_x2, the last dimension halved; an odd one is refused."""
    from safetensors import safe_open
    st, pt = tmp_path / "f4.safetensors", tmp_path / "f4.pt"
    write_f4(st, [2, 6], 6)
    with safe_open(str(st), "pt") as f:
        want = f.get_tensor("x")
    r = run("convert", st, pt)
    assert r.returncode == 0, r.stderr
    same(torch.load(pt)["x"], want)
    odd, out = tmp_path / "odd.safetensors", tmp_path / "odd.pt"
    write_f4(odd, [6, 1], 3)
    r = run("convert", odd, out)
    assert r.returncode != 0 and "even, contiguous last dimension" in r.stderr, r.stderr
    assert not out.exists()


def test_save_to_a_symlink_replaces_the_link_not_its_target(tmp_path):
    """ckpt.save to a name that is a symbolic link (a Hugging Face cache
    snapshot's link into blobs/, shared by revisions): the link becomes a
    regular file, and the file it pointed to keeps its bytes."""
    blob = tmp_path / "blob"
    blob.write_bytes(b"shared")
    link = tmp_path / "model.safetensors"
    link.symlink_to("blob")
    ckpt.save({"w": torch.arange(4.0)}, str(link))
    assert not link.is_symlink() and link.is_file()
    assert blob.read_bytes() == b"shared"
    assert torch.equal(ckpt.load(str(link))["w"], torch.arange(4.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob", "model.safetensors"]
