"""What ckpt.save and Store.commit record that the file does not carry
(issue 14 item 8): versions, model class and source file, dtype intent,
device; doctor shows them; ckpt.check_reload."""
import json
import os
import platform
import subprocess

import pytest
import torch

import ckpt

CKPT_BIN = os.environ.get("CKPT_BIN", "ckpt")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.bn = torch.nn.BatchNorm1d(3)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(self.fc(x))), self.fc.weight.sum()


def trained():
    torch.manual_seed(0)
    m = Net()
    m(torch.randn(8, 4))  # the batch-norm statistics move away from their init
    return m


@pytest.mark.parametrize("ext", [".pt", ".safetensors"])
def test_save_records_the_saving_environment(tmp_path, ext):
    path = tmp_path / ("m" + ext)
    m = trained().to(torch.float64)
    ckpt.save({"model": m, "step": 1}, path)
    md = ckpt.metadata(path)
    assert md["ckpt.versions"] == {"torch": torch.__version__, "python": platform.python_version(),
                                   "ckpt": ckpt.__version__, "numpy": __import__("numpy").__version__}
    assert md["ckpt.model"] == {"model": {"class": "%s.Net" % __name__, "source": __file__}}
    assert md["ckpt.dtype"] == {"default": "torch.float32", "parameters": {"torch.float64": 4}}
    assert md["ckpt.device"] == "cpu"
    # doctor shows each under its topic, text and JSON
    out = subprocess.run([CKPT_BIN, "doctor", str(path)], stdout=subprocess.PIPE).stdout.decode()
    section = out[out.index("\nmetadata\n"):].split("\n\n")[0]
    topics, topic = {}, None
    for line in section.splitlines()[2:]:
        if line.startswith("    "):
            topics.setdefault(topic, []).append(line.split(" = ")[0].strip())
        else:
            topic = line.strip().rstrip(":")
    assert topics["architecture config"] == ["ckpt.model"], section
    assert topics["dtype intent"] == ["ckpt.dtype"], section
    assert topics["library versions"] == ["ckpt.versions"], section
    assert "ckpt.device" in topics["other"], section
    assert "library versions" not in section.split("not carried:")[-1]
    doc = json.loads(subprocess.run([CKPT_BIN, "doctor", "--json", str(path)],
                                    stdout=subprocess.PIPE).stdout)
    meta = doc["sections"]["metadata"]
    got = {e["key"]: json.loads(e["value"]) for topic in ("architecture_config", "dtype_intent",
                                                          "library_versions", "other")
           for e in meta[topic] if e["key"].startswith("ckpt.")}
    assert got == {k: md[k] for k in ("ckpt.model", "ckpt.dtype", "ckpt.versions", "ckpt.device")}
    # convert keeps the records
    out_path = tmp_path / ("c" + (".safetensors" if ext == ".pt" else ".pt"))
    subprocess.run([CKPT_BIN, "convert", "-q", str(path), str(out_path)], check=True)
    assert {k: v for k, v in ckpt.metadata(out_path).items() if k in got} == got


def test_record_source_false_and_autocast(tmp_path):
    path = tmp_path / "m.pt"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ckpt.save(trained(), path, record_source=False)
    md = ckpt.metadata(path)
    assert md["ckpt.model"] == {"": {"class": "%s.Net" % __name__}}
    assert md["ckpt.dtype"]["autocast"] == {"cpu": "torch.bfloat16"}
    assert md["ckpt.dtype"]["parameters"] == {"torch.float32": 4}


def test_store_commit_records(tmp_path):
    store = ckpt.Store(tmp_path / "run", keep=2)
    p = store.commit({"model": trained()}, 1, record_source=False)
    md = ckpt.metadata(p)
    assert md["ckpt.model"] == {"model": {"class": "%s.Net" % __name__}}
    assert md["ckpt.versions"]["torch"] == torch.__version__


def _has_safetensors():
    try:
        import safetensors.torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("ext", [".pt", ".safetensors"])
def test_check_reload(tmp_path, ext):
    path = tmp_path / ("m" + ext)
    m = trained()
    ckpt.save({"model": m, "epoch": 2}, path)
    x = torch.randn(5, 4)
    r = ckpt.check_reload(Net, path, x, model=m)
    assert r.equal and r.outputs == 2 and r.match.complete
    assert m.training  # the original's mode is restored
    # no model given: the original is loaded by torch's (or safetensors')
    # own loader
    if ext == ".pt" or _has_safetensors():
        assert ckpt.check_reload(Net, path, x).outputs == 2
    # a model that is not the saved one differs
    with pytest.raises(ckpt.MismatchError, match=r"output\[0\] differs"):
        ckpt.check_reload(Net, path, x, model=Net())
    # the factory must give a fresh model
    with pytest.raises(ckpt.InvalidArgumentError, match="fresh"):
        ckpt.check_reload(lambda: m, path, x, model=m)


class Scaled(torch.nn.Module):
    """A scale held as a plain attribute: not in state_dict, not saved."""
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = torch.ones(4)

    def forward(self, x):
        return {"y": self.fc(x) * self.scale}


def test_check_reload_says_which_output_by_how_much_and_why(tmp_path):
    """tryout: check_reload's error said only "output differs after
    reloading". It names the output, the largest absolute difference and
    the elements that differ, and the audit finding that explains it
    (the plain-attribute tensor the file does not hold)."""
    torch.manual_seed(0)
    m = Scaled()
    m.scale = torch.tensor([1.0, 2.0, 1.0, 1.0])  # only column 1 changes on reload
    path = tmp_path / "scaled.pt"
    with pytest.warns(ckpt.AuditWarning):
        ckpt.save(m, path)
    x = torch.randn(3, 4)
    with torch.no_grad():
        gap = float((m.fc(x)[:, 1]).abs().max())  # y * 2 against y * 1
    with pytest.raises(ckpt.MismatchError) as e:
        ckpt.check_reload(Scaled, path, x, model=m)
    msg = str(e.value)
    assert msg.startswith("%s: output['y'] differs after reloading" % path), msg
    assert "max abs difference %.6g (3 of 12 elements differ)" % gap in msg, msg
    assert "scale (F32 [4], in Scaled) is a plain tensor attribute" in msg, msg
    assert e.value.output == "output['y']"
    assert [f.kind for f in e.value.findings] == ["plain-attribute"]
    # nothing left out: said, and no finding given
    torch.save(Net().state_dict(), tmp_path / "net.pt")
    with pytest.raises(ckpt.MismatchError, match="finds nothing the file leaves out") as e:
        ckpt.check_reload(Net, tmp_path / "net.pt", torch.randn(5, 4), model=trained())
    assert e.value.findings == ()
