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
             os.path.join(REPO, "examples", "train.safetensors"),
             os.path.join(REPO, "examples")]
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
