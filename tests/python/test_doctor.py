"""ckpt.doctor: the library's report is the dict `ckpt doctor --json`
prints, for healthy, corrupt, unopenable, sharded and directory inputs."""
import json
import os
import shutil
import subprocess

import pytest

import ckpt

from conftest import CORPUS, REPO

CKPT_BIN = os.environ.get("CKPT_BIN")


def cli_json(path):
    # a sanitized build preloads its runtime into python; the executable
    # links its own
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    p = subprocess.run([CKPT_BIN, "doctor", "--json", path], capture_output=True, env=env)
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout)


def cases(tmp_path):
    paths = [os.path.join(REPO, "examples", "train.pt"),
             os.path.join(REPO, "examples", "train.safetensors")]
    # examples/ holds model weights in two files: several checkpoints, refused
    with open(paths[0], "rb") as fh:
        data = fh.read()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    pickle0 = tmp_path / "p0.pkl"
    pickle0.write_bytes(b"cposix\nsystem\n(Vtouch /tmp/x\ntR.")
    paths += [str(truncated), str(pickle0)]
    sharded = os.path.join(CORPUS, "safetensors/fluxml/sharded/model.safetensors.index.json")
    if os.path.exists(sharded):
        paths.append(sharded)
    return paths


@pytest.mark.skipif(not CKPT_BIN, reason="CKPT_BIN (the ckpt executable) not set")
def test_doctor_is_the_cli_json(tmp_path):
    for path in cases(tmp_path):
        assert ckpt.doctor(path) == cli_json(path), path


def test_doctor_values(tmp_path):
    doc = ckpt.doctor(os.path.join(REPO, "examples", "train.pt"))
    assert doc["verdict"] == "healthy", doc["summary"]
    assert doc["summary"].startswith("HEALTHY: torch-zip, 16 keys")
    assert doc["sections"]["integrity"]["ok"] is True
    assert doc["sections"]["safety"]["verdict"] == "safe"
    bad = tmp_path / "p0.pkl"
    bad.write_bytes(b"cposix\nsystem\n(Vtouch /tmp/x\ntR.")
    doc = ckpt.doctor(bad)
    assert doc["verdict"] == "attention"
    assert doc["sections"]["safety"]["verdict"] == "unsafe"
    assert "posix.system" in doc["summary"], doc["summary"]


def test_doctor_unreadable(tmp_path):
    with pytest.raises(ckpt.FileError):
        ckpt.doctor(tmp_path / "missing.pt")
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with pytest.raises(ckpt.NotFoundError) as e:
        ckpt.doctor(empty)
    assert "no checkpoint file" in str(e.value)


def _cli(*args):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run([CKPT_BIN, *args], capture_output=True, env=env, text=True)


def _train_state():
    import torch
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(2, 4)).sum().backward()
    opt.step()
    return m, opt


@pytest.mark.skipif(not CKPT_BIN, reason="CKPT_BIN (the ckpt executable) not set")
def test_doctor_store_is_latest_generation_alone(tmp_path):
    # regression: full states at 4 and 5, weights only at 10 (async): the
    # directory was combined into a "full-resume" of ckpt-10's model and
    # ckpt-4's optimizer
    m, opt = _train_state()
    d = str(tmp_path / "store")
    s = ckpt.Store(d)
    s.commit({"model": m.state_dict(), "optimizer": opt.state_dict()}, 4)
    s.commit({"model": m.state_dict(), "optimizer": opt.state_dict()}, 5)
    s.async_commit({"model": m.state_dict()}, 10)
    s.wait()
    with pytest.raises(ckpt.ResumeError):
        s.resume(m, opt)
    rep = ckpt.doctor(d)
    assert rep["sections"]["resume"]["verdict"] == "warm-start-only"
    assert rep["verdict"] == "attention"
    store = rep["sections"]["store"]
    assert store["latest"] == "ckpt-10.pt" and store["pointer"] == "ok"
    assert [(g["file"], g["ok"], g["latest"]) for g in store["generations"]] == [
        ("ckpt-4.pt", True, False), ("ckpt-5.pt", True, False), ("ckpt-10.pt", True, True)]
    assert rep == cli_json(d)
    p = _cli("doctor", d)
    assert p.returncode == 1 and "full-resume" not in p.stdout
    assert "ckpt-10.pt: OK  <- LATEST" in p.stdout
    # inspect and verify of the store read the same generation
    p = _cli("verify", d)
    assert p.returncode == 0 and "4 keys" in p.stdout
    # a plain folder of two steps is several checkpoints, never combined
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in ("ckpt-4.pt", "ckpt-10.pt"):
        shutil.copy(os.path.join(d, f), plain / f)
    p = _cli("doctor", str(plain))
    assert p.returncode == 1, p.stdout
    assert "full-resume" not in p.stdout
    assert 'model weights in both "ckpt-10.pt" and "ckpt-4.pt"' in p.stderr
    # a model directory's weights files are copies of one save: combined
    # with optimizer.pt, but not with a checkpoint of another step
    import torch
    hf = tmp_path / "hf"
    hf.mkdir()
    ckpt.save(m.state_dict(), str(hf / "model.safetensors"))
    torch.save(m.state_dict(), hf / "pytorch_model.bin")
    torch.save(opt.state_dict(), hf / "optimizer.pt")
    assert ckpt.doctor(str(hf))["sections"]["resume"]["verdict"] == "full-resume"
    shutil.copy(os.path.join(d, "ckpt-4.pt"), hf / "ckpt-4.pt")
    p = _cli("doctor", str(hf))
    assert p.returncode == 1 and 'model weights in both "ckpt-4.pt" and "model.safetensors"' in p.stderr


@pytest.mark.skipif(not CKPT_BIN, reason="CKPT_BIN (the ckpt executable) not set")
def test_doctor_corrupt_claims_no_resume(tmp_path):
    # regression: a flipped byte inside tensor data was CORRUPT and yet
    # "resume readiness: full-resume"; torch.load loads it silently
    import struct
    import zipfile
    import torch
    m, opt = _train_state()
    good = tmp_path / "good.pt"
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict()}, good)
    b = bytearray(good.read_bytes())
    info = [i for i in zipfile.ZipFile(good).infolist() if i.filename.endswith("data/0")][0]
    n, x = struct.unpack("<HH", b[info.header_offset + 26:info.header_offset + 30])
    b[info.header_offset + 30 + n + x] ^= 0x40
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b)
    # torch.load raises nothing: the damaged value is loaded silently
    # our own files (torch 1.13's weights_only unpickler lacks BINFLOAT)
    before, after = torch.load(good, weights_only=False), torch.load(bad, weights_only=False)
    flat = lambda o: [t for v in o.values() for t in (flat(v) if isinstance(v, dict) else
                                                      [v] if isinstance(v, torch.Tensor) else [])]
    assert sum(not torch.equal(x, y) for x, y in zip(flat(before), flat(after))) == 1
    rep = ckpt.doctor(str(bad))
    res = rep["sections"]["resume"]
    assert res["verdict"] is None
    assert "fail verification" in res["withheld"] and "inside tensor data" in res["withheld"]
    p = _cli("doctor", str(bad))
    assert p.returncode == 1 and "full-resume" not in p.stdout
    assert p.stdout.startswith("ATTENTION: corrupt")


@pytest.mark.skipif(not CKPT_BIN, reason="CKPT_BIN (the ckpt executable) not set")
def test_inspect_unsafe_pickle_warns_and_exits_1(tmp_path):
    # regression: `ckpt inspect evil.pt` exited 0 showing <object posix.system>
    evil = tmp_path / "evil.pt"
    evil.write_bytes(b"\x80\x02}X\x01\x00\x00\x00xcposix\nsystem\nX\x04\x00\x00\x00true\x85Rs.")
    p = _cli("inspect", str(evil))
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "<object posix.system>" in p.stdout
    assert "unsafe: torch.load would call posix.system" in p.stderr
    safe = tmp_path / "safe.pt"
    import torch
    torch.save({"w": torch.zeros(2)}, safe)
    p = _cli("inspect", str(safe))
    assert p.returncode == 0 and p.stderr == ""


def test_doctor_weights_copies_tied_head_is_no_difference(tmp_path):
    """model.safetensors saved by safetensors' save_model (the tied head
    dropped) beside pytorch_model.bin from torch.save (the head under its
    own name, one storage): the same weights, healthy; a .bin of another
    revision (a head of its own) is named as differing."""
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    nn = torch.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 6)
            self.head = nn.Linear(6, 10, bias=False)
            self.head.weight = self.embed.weight

    m = LM()
    st.save_model(m, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    torch.save(m.state_dict(), tmp_path / "pytorch_model.bin")
    doc = ckpt.doctor(tmp_path)
    assert doc["verdict"] == "healthy", doc["summary"]
    assert doc["sections"]["other_files"] == [
        {"name": "pytorch_model.bin", "ok": True, "bytes_checked": 632, "differs": False}]
    sd = m.state_dict()
    sd["head.weight"] = sd["head.weight"].clone() + 1  # untied: another model
    torch.save(sd, tmp_path / "pytorch_model.bin")
    doc = ckpt.doctor(tmp_path)
    other = doc["sections"]["other_files"][0]
    assert doc["verdict"] == "attention" and other["differs"] and not other["ok"], other
    assert other["error"] == ("holds other weights than model.safetensors, which loaders read "
                              "first: 1 key only in pytorch_model.bin (first: head.weight)")
