#!/usr/bin/python3
"""ckpt.dcp.Writer / Reader under torch.distributed.checkpoint (torch 2.13,
gloo, ranks as subprocesses on this machine): a state dict of DTensors
sharded over the ranks (an uneven split too), a replicated DTensor, a
plain tensor and non-tensor items, saved by 2 ranks with dcp.save and
dcp.async_save, loaded back by 2 ranks, resharded into 4 ranks and into
one process (ckpt.dcp.load); saved by 4 ranks and loaded by one. The
directory is DCP's layout with ckpt's digests (ckpt verify accepts each
data file); a flipped byte in a shard is caught by Reader and by
ckpt.dcp.verify; a .metadata
that imports anything beside DCP's classes is refused.

Re-runs itself under the project's torch 2.13 (.venv) when started by an
older python; SKIP without it. Ends with "N passed, N failed"."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import dcp_ranks  # noqa: E402
from suite import CORPUS_SUITE, run_cases  # noqa: E402

sys.path.insert(0, os.path.join(dcp_ranks.SRC, "python"))

SCRIPT = os.path.abspath(__file__)
TMP = None


def expected():
    """The full state, the same on every rank (fixed seeds)."""
    import torch
    g = torch.Generator().manual_seed(15)
    return {
        "model": {"embed.weight": torch.randn(8, 6, generator=g),
                  "odd.weight": torch.randn(5, 3, generator=g),  # 5 rows: uneven shards
                  "norm.weight": torch.randn(6, generator=g),    # replicated DTensor
                  "count": torch.arange(7, dtype=torch.int64)},  # plain tensor
        "optim": {"lr": 0.25, "betas": [0.9, 0.99], "name": "adam"},
        "step": 42, "blob": b"\x00\x01ckpt",
    }


def distributed(full, mesh):
    """full with the model's matrices as DTensors: Shard(0) except
    norm.weight (Replicate)."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    out = dict(full)
    m = dict(full["model"])
    for k in ("embed.weight", "odd.weight"):
        m[k] = distribute_tensor(m[k], mesh, [Shard(0)])
    m["norm.weight"] = distribute_tensor(m["norm.weight"], mesh, [Replicate()])
    out["model"] = m
    return out


def template(mesh):
    """What a load fills: zeros of the right layout, blank non-tensors."""
    import torch
    t = distributed(expected(), mesh)
    for k, v in t["model"].items():
        t["model"][k] = v.clone().zero_() if hasattr(v, "to_local") else torch.zeros_like(v)
    t.update(optim={"lr": 0.0, "betas": [0.0, 0.0], "name": ""}, step=0, blob=b"")
    return t


def check_loaded(got, mesh):
    import torch
    want = distributed(expected(), mesh)
    for k, v in want["model"].items():
        a, b = got["model"][k], v
        if hasattr(b, "to_local"):
            assert a.placements == b.placements, (k, a.placements)
            a, b = a.to_local(), b.to_local()
        assert torch.equal(a, b), (k, a, b)
    for k in ("optim", "step", "blob"):
        assert got[k] == want[k], (k, got[k], want[k])


def mesh_of_world():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", (dist.get_world_size(),))


# ------------------------------------------------------------ ranks


def rank_save(path, how):
    import torch.distributed.checkpoint as dcp
    import ckpt.dcp
    sd = distributed(expected(), mesh_of_world())
    if how == "async":
        dcp.async_save(sd, storage_writer=ckpt.dcp.Writer(path)).result()
    else:
        dcp.save(sd, storage_writer=ckpt.dcp.Writer(path))


def rank_load(*paths):
    import torch.distributed.checkpoint as dcp
    import ckpt.dcp
    mesh = mesh_of_world()
    for p in paths:
        got = template(mesh)
        dcp.load(got, storage_reader=ckpt.dcp.Reader(p))
        check_loaded(got, mesh)


def rank_save_torch_save(path):
    import torch.distributed.checkpoint as dcp
    import ckpt.dcp
    dcp.save(distributed(expected(), mesh_of_world()),
             storage_writer=ckpt.dcp.Writer(path, serialization="torch_save"))


def rank_plain_load(path):
    """DCP's own reader, nothing of ckpt's: dcp.load(checkpoint_id=...)."""
    import torch.distributed.checkpoint as dcp
    mesh = mesh_of_world()
    got = template(mesh)
    dcp.load(got, checkpoint_id=path)
    check_loaded(got, mesh)


def rank_save_load(path, other):
    """Save (sync and async) and load back in the same world."""
    rank_save(path, "sync")
    rank_save(other, "async")
    rank_load(path, other)


# ------------------------------------------------------------ cases


def w2():
    """The directory 2 ranks wrote (written once)."""
    return os.path.join(TMP, "w2")


def test_a_two_ranks_save_and_load_back():
    dcp_ranks.run(SCRIPT, "rank_save_load", 2, w2(), os.path.join(TMP, "w2async"))
    names = sorted(os.listdir(w2()))
    assert names == [".metadata", "__0_0.distcp", "__1_0.distcp"], names
    ckpt_bin = os.environ.get("CKPT_BIN")
    for n in names[1:]:
        if ckpt_bin:
            r = subprocess.run([ckpt_bin, "verify", os.path.join(w2(), n)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            assert r.returncode == 0 and b"OK" in r.stdout, r.stdout
    import ckpt
    import ckpt.dcp
    import torch
    for n in names[1:]:  # each data file records what it was saved with, as ckpt.save does
        meta = ckpt.metadata(os.path.join(w2(), n))
        assert meta["ckpt.versions"]["torch"] == torch.__version__, meta
        assert meta["ckpt.device"] == "cpu", meta
    for d in (w2(), os.path.join(TMP, "w2async")):
        rep = ckpt.dcp.verify(d)
        assert rep.ok and rep.format == "dcp" and rep.tensors >= 8, rep
        # every data file's ckpt.xxh3 was checked: it said "none"
        assert rep.checksums == "digests", rep
        # the C verify of the directory says so too: a bytes item's
        # torch.save slice lies in a U8 tensor whose digest it checked (it
        # said "crc32", the slice's own zip CRC-32s)
        assert ckpt.verify(d).checksums == "digests", ckpt.verify(d)
        if ckpt_bin:
            r = subprocess.run([ckpt_bin, "verify", "--json", d], stdout=subprocess.PIPE)
            assert r.returncode == 0 and json.loads(r.stdout)["checksums"] == "digests", r.stdout
            r = subprocess.run([ckpt_bin, "verify", "-v", d], stdout=subprocess.PIPE)
            assert r.returncode == 0 and b"\n  checksums: digests;" in r.stdout, r.stdout


def test_b_reshard_two_to_four():
    dcp_ranks.run(SCRIPT, "rank_load", 4, w2(), os.path.join(TMP, "w2async"))


def test_c_reshard_to_one_process():
    import torch
    import ckpt.dcp
    got = ckpt.dcp.load(w2())
    want = expected()
    for k, v in want["model"].items():
        assert torch.equal(got["model"][k], v), k
    assert {k: got[k] for k in ("optim", "step", "blob")} == \
        {k: want[k] for k in ("optim", "step", "blob")}


def test_d_four_ranks_to_one():
    import torch
    import ckpt.dcp
    d = os.path.join(TMP, "w4")
    dcp_ranks.run(SCRIPT, "rank_save", 4, d, "sync")
    assert sorted(f for f in os.listdir(d) if f.endswith(".distcp"))[-1] == "__3_0.distcp"
    got = ckpt.dcp.load(d)
    for k, v in expected()["model"].items():
        assert torch.equal(got["model"][k], v), k


def test_e_flipped_byte_caught():
    import struct
    import ckpt
    import ckpt.dcp
    import torch
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException
    d = os.path.join(TMP, "flip")
    shutil.copytree(w2(), d)
    f = os.path.join(d, "__1_0.distcp")
    with open(f, "rb") as fh:
        head = fh.read(8)
        n = struct.unpack("<Q", head)[0]
        hdr = json.loads(fh.read(n))
    # rank 1 holds the second half of embed.weight: flip its last byte
    b, e = hdr["model.embed.weight"]["data_offsets"]
    with open(f, "r+b") as fh:
        fh.seek(8 + n + e - 1)
        c = fh.read(1)
        fh.seek(8 + n + e - 1)
        fh.write(bytes([c[0] ^ 0x10]))
    rep = ckpt.dcp.verify(d)
    assert not rep.ok and rep.error.code == ckpt.ChecksumError.code, rep
    # and ckpt's own verify of the data file (what `ckpt verify` reads)
    assert not ckpt.verify(f).ok
    for sd in (None, {"model": {"embed.weight": torch.zeros(8, 6)}}):
        try:
            if sd is None:
                ckpt.dcp.load(d)
            else:
                import torch.distributed.checkpoint as dcp
                dcp.load(sd, storage_reader=ckpt.dcp.Reader(d), no_dist=True)
        except (Exception, CheckpointException) as e:  # DCP wraps the reader's error
            assert "CKPT_E_CHECKSUM" in str(e) and "model.embed.weight" in str(e), e
        else:
            raise AssertionError("the flipped byte was not caught")


def test_e_partial_read_checks_whole_chunk():
    """A read that needs only the first row of rank 1's chunk of
    embed.weight (rows 4..7) still reads and checks the whole chunk: a
    flipped byte in row 7 is caught."""
    import torch
    import ckpt
    import ckpt.dcp
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem
    d = os.path.join(TMP, "flip")  # test_e_flipped_byte_caught's copy
    r = ckpt.dcp.Reader(d)
    r.set_up_storage_reader(r.read_metadata(), True)
    idx = MetadataIndex("model.embed.weight", torch.Size([4, 0]))
    req = ReadItem(type=LoadItemType.TENSOR, dest_index=idx, dest_offsets=torch.Size([0, 0]),
                   storage_index=idx, storage_offsets=torch.Size([0, 0]),
                   lengths=torch.Size([1, 6]))

    class Planner:
        def resolve_tensor(self, req):
            return torch.zeros(1, 6)

        def commit_tensor(self, req, t):
            raise AssertionError("a row of a corrupt chunk was handed out")
    try:
        r.read_data(LoadPlan([req]), Planner())
    except ckpt.ChecksumError as e:
        assert e.member == "model.embed.weight" and e.file.endswith("__1_0.distcp"), e
    else:
        raise AssertionError("the flipped byte was not caught")


def test_e_whole_chunks_read_into_the_target():
    """A chunk that maps whole onto a contiguous block of the target is
    read by one pread straight into the target (no buffer): 2 ranks' row
    blocks of embed.weight land at the target's first and fifth row."""
    import torch
    import torch.distributed.checkpoint as dcp
    import ckpt.dcp
    seen, real = [], ckpt.dcp._pread_into

    def spy(fd, buf, off, path, what):
        seen.append((what, buf.data_ptr(), buf.numel()))
        return real(fd, buf, off, path, what)
    ckpt.dcp._pread_into = spy
    try:
        t = {"model": {"embed.weight": torch.zeros(8, 6), "odd.weight": torch.zeros(5, 3)}}
        dcp.load(t, storage_reader=ckpt.dcp.Reader(w2()), no_dist=True)
    finally:
        ckpt.dcp._pread_into = real
    want = expected()["model"]
    for k in t["model"]:
        assert torch.equal(t["model"][k], want[k]), k
    e = t["model"]["embed.weight"]
    assert sorted(p for w, p, _ in seen if w == "model.embed.weight") == \
        [e.data_ptr(), e.data_ptr() + 4 * 6 * 4], seen
    assert len(seen) == 4, seen  # one pread per chunk


def test_h_torch_save_layout_plain_dcp_load():
    """Writer(serialization="torch_save") writes DCP's own layout: plain
    dcp.load (FileSystemReader) reads it back on 2 ranks; ckpt verify and
    ckpt.dcp.verify check every byte against the zip CRCs; ckpt.dcp.load
    verifies first; ckpt.dcp.Reader refuses it by name."""
    import torch
    import ckpt
    import ckpt.dcp
    from torch.distributed.checkpoint.api import CheckpointException
    d = os.path.join(TMP, "ts")
    dcp_ranks.run(SCRIPT, "rank_save_torch_save", 2, d)
    assert sorted(os.listdir(d)) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    with open(os.path.join(d, "__0_0.distcp"), "rb") as f:
        assert f.read(4) == b"PK\x03\x04"
    dcp_ranks.run(SCRIPT, "rank_plain_load", 2, d)
    rep = ckpt.dcp.verify(d)
    assert rep.ok and rep.format == "dcp" and rep.tensors == 4, rep
    assert rep.checksums == "crc32" == ckpt.verify(d).checksums, rep  # it said "none"
    ckpt_bin = os.environ.get("CKPT_BIN")
    if ckpt_bin:
        r = subprocess.run([ckpt_bin, "verify", d], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        assert r.returncode == 0 and b"OK" in r.stdout, r.stdout
    got = ckpt.dcp.load(d)
    for k, v in expected()["model"].items():
        assert torch.equal(got["model"][k], v), k
    try:
        ckpt.dcp.Reader(d).set_up_storage_reader(ckpt.dcp.read_metadata(d), True)
    except ckpt.UnsupportedError as e:
        assert "torch.save" in str(e), e
    else:
        raise AssertionError("Reader took a directory without digests")
    # a flipped byte in the data of rank 1's chunk of embed.weight
    import io
    import struct
    import zipfile
    from torch.distributed.checkpoint.metadata import MetadataIndex
    md = ckpt.dcp.read_metadata(d)
    info = md.storage_data[MetadataIndex("model.embed.weight", torch.Size([4, 0]))]
    assert info.relative_path == "__1_0.distcp", info
    f = os.path.join(d, info.relative_path)
    with open(f, "rb") as fh:
        blob = bytearray(fh.read())
    zs = zipfile.ZipFile(io.BytesIO(bytes(blob[info.offset:info.offset + info.length])))
    m = next(i for i in zs.infolist() if i.filename.endswith("/data/0"))
    n, x = struct.unpack("<HH", blob[info.offset + m.header_offset + 26:
                                     info.offset + m.header_offset + 30])
    blob[info.offset + m.header_offset + 30 + n + x] ^= 0x01  # first byte of the data
    with open(f, "wb") as fh:
        fh.write(blob)
    rep = ckpt.dcp.verify(d)
    assert not rep.ok and "CRC" in str(rep.error), rep
    try:
        ckpt.dcp.load(d)
    except (ckpt.Error, CheckpointException) as e:
        assert "CRC" in str(e), e
    else:
        raise AssertionError("ckpt.dcp.load read a corrupt torch.save layout")


def test_h_torch_save_write_verified_from_disk():
    """The torch.save layout's commit re-reads its file from disk: a byte
    that changed between the write and the read fails the save and no
    .metadata is written."""
    import torch
    import torch.distributed.checkpoint as dcp
    import ckpt
    import ckpt.dcp
    from torch.distributed.checkpoint.api import CheckpointException
    d = os.path.join(TMP, "ts-bad")
    real = ckpt.dcp._write_atomic

    def flipping(path, data):
        real(path, data)
        if path.endswith(".distcp"):
            with open(path, "r+b") as fh:
                fh.seek(-100, 2)
                c = fh.read(1)
                fh.seek(-100, 2)
                fh.write(bytes([c[0] ^ 0x40]))
    ckpt.dcp._write_atomic = flipping
    try:
        dcp.save({"w": torch.randn(64, 8)}, no_dist=True,
                 storage_writer=ckpt.dcp.Writer(d, serialization="torch_save"))
    except (ckpt.ChecksumError, CheckpointException) as e:
        assert "CKPT_E_CHECKSUM" in str(e) and "as read from disk" in str(e), e
    else:
        raise AssertionError("a changed byte on disk was not caught by the commit")
    finally:
        ckpt.dcp._write_atomic = real
    assert not os.path.exists(os.path.join(d, ".metadata"))
    try:
        ckpt.dcp.Writer(d, serialization="pickle")
    except ckpt.InvalidArgumentError as e:
        assert "torch_save" in str(e), e
    else:
        raise AssertionError("an unknown serialization was taken")


def test_h_torch_save_failed_write_leaves_the_save_before():
    """The torch.save layout writes through libckpt's atomic writer: a
    data file that cannot be written (RLIMIT_FSIZE, in a child process:
    EFBIG, no SIGXFSZ) fails the save with that error, the data file of
    the save before is left as it was, and no temporary file is behind."""
    import torch
    import torch.distributed.checkpoint as dcp
    import ckpt.dcp
    d = os.path.join(TMP, "ts-limit")
    dcp.save({"w": torch.arange(16.0)}, no_dist=True,
             storage_writer=ckpt.dcp.Writer(d, serialization="torch_save"))
    before = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as fh:
            before[f] = fh.read()
    assert "__0_0.distcp" in before and ".metadata" in before, sorted(before)
    code = ("import resource, sys, warnings, torch, ckpt.dcp\n"
            "import torch.distributed.checkpoint as dcp\n"
            "warnings.filterwarnings('ignore')\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))\n"
            "try:\n"
            "    dcp.save({'w': torch.randn(4096, 64)}, no_dist=True,\n"
            "             storage_writer=ckpt.dcp.Writer(sys.argv[1], serialization='torch_save'))\n"
            "except BaseException as e:  # DCP's CheckpointException\n"
            "    print('failed:', e)\n"
            "    sys.exit(3)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(dcp_ranks.SRC, "python"))
    p = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True, env=env)
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr[-2000:])
    assert "File too large" in p.stdout and "__0_0.distcp" in p.stdout, p.stdout
    after = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as fh:
            after[f] = fh.read()
    # the data file as it was, nothing else there: the .metadata the
    # overwrite removes before any data file is written (prepare_global_plan,
    # so no set is ever named complete while its files change) stays gone
    del before[".metadata"]
    assert after == before, (sorted(before), sorted(after))


def test_f_missing_metadata_and_shard():
    import ckpt
    import ckpt.dcp
    d = os.path.join(TMP, "nometa")
    shutil.copytree(w2(), d)
    os.unlink(os.path.join(d, "__0_0.distcp"))
    rep = ckpt.dcp.verify(d)
    assert not rep.ok and "__0_0.distcp" in str(rep.error), rep
    os.unlink(os.path.join(d, ".metadata"))
    rep = ckpt.dcp.verify(d)
    assert not rep.ok and rep.error.code == ckpt.NotFoundError.code, rep


def test_g_hostile_metadata_refused():
    import pickle
    import ckpt
    import ckpt.dcp
    d = os.path.join(TMP, "hostile")
    shutil.copytree(w2(), d)

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned > %s" % os.path.join(d, "pwned"),))
    with open(os.path.join(d, ".metadata"), "wb") as f:
        pickle.dump(Boom(), f)
    try:
        ckpt.dcp.Reader(d).read_metadata()
    except ckpt.UnsafeError as e:
        assert "os.system" in str(e) or "posix.system" in str(e), e
    else:
        raise AssertionError("hostile .metadata accepted")
    assert not os.path.exists(os.path.join(d, "pwned"))


def test_h_atomic_put_kept_past_the_write():
    """A put that the data function keeps and calls after _write_atomic
    returned (committed) or raised (aborted) raises InvalidArgumentError:
    the handle is freed by then (it was a use after free, SIGSEGV). The
    target is as committed, no temporary file is left."""
    import ckpt.dcp
    d = os.path.join(TMP, "kept-put")
    os.makedirs(d)
    target, kept = os.path.join(d, "f"), []

    def keep(put):
        kept.append(put)
        put(memoryview(b"12"))
    ckpt.dcp._write_atomic(target, keep)

    def keep_and_fail(put):
        kept.append(put)
        put(memoryview(b"3"))
        raise KeyboardInterrupt
    try:
        ckpt.dcp._write_atomic(target, keep_and_fail)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the data function's KeyboardInterrupt was lost")
    for put in kept:
        try:
            put(memoryview(b"4"))
        except ckpt.InvalidArgumentError as e:
            assert "finished" in str(e) and target in str(e), e
        else:
            raise AssertionError("a write after the end was taken")
    with open(target, "rb") as fh:
        assert fh.read() == b"12"
    assert os.listdir(d) == ["f"], os.listdir(d)


def main():
    global TMP
    if CORPUS_SUITE:  # no corpus cases: no torch 2 to start
        return run_cases(globals(), SCRIPT)
    dcp_ranks.reexec(SCRIPT)
    dcp_ranks.rank_main(globals())
    import warnings
    warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
    TMP = tempfile.mkdtemp(prefix="ckpt-dcp-")
    try:
        return run_cases(globals(), SCRIPT)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
