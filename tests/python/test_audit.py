"""Key-audit answers on torch-made checkpoints (issue 13): wrapper prefixes
below the top level of a training checkpoint (ckpt doctor), and resume into
an optimizer the saved state does not fit (ckpt.Store.resume)."""
import json
import os
import subprocess
from collections import OrderedDict

import pytest
import torch

BIN = os.environ.get("CKPT_BIN", "ckpt")


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(OrderedDict(fc=torch.nn.Linear(3, 2), out=torch.nn.Linear(2, 1)))


def doctor_keys(path):
    p = subprocess.run([BIN, "doctor", "--json", str(path)], capture_output=True, timeout=60)
    return json.loads(p.stdout)["sections"]["keys"], \
        subprocess.run([BIN, "doctor", str(path)], capture_output=True, timeout=60).stdout.decode()


def apply_python_fix(fix, sd):
    exec(fix, {}, {"sd": sd})


def test_doctor_ddp_in_training_dict(tmp_path):
    root, fix = "model", "--replace 'model.module.=model.'"
    m = net()
    sd = {"module." + k: v for k, v in m.state_dict().items()}  # what DDP's state_dict() gives
    opt = torch.optim.Adam(m.parameters())
    path = tmp_path / "ddp.pt"
    torch.save({root: sd, "optimizer": opt.state_dict(), "epoch": 3}, path)
    keys, text = doctor_keys(path)
    assert keys["root"] == root + "."
    assert [(w["segment"], w["keys"]) for w in keys["wrappers"]] == [("module.", 4)]
    assert keys["fix"] == fix
    assert "fix: ckpt rename %s OUT %s" % (path, fix) in text
    assert "under 'model.'" in text
    # the printed fix, applied by the CLI and by Python, gives loadable keys
    out = tmp_path / "fixed.pt"
    subprocess.run([BIN, "rename", str(path), str(out), "--replace", "model.module.=model."],
                   check=True, capture_output=True, timeout=60)
    fixed = torch.load(out)
    net().load_state_dict(fixed["model"])
    assert sorted(fixed) == ["epoch", "model", "optimizer"]
    loaded = torch.load(path)
    apply_python_fix(keys["fix_python"], loaded)
    net().load_state_dict(loaded["model"])
    keys, text = doctor_keys(out)
    assert keys["wrappers"] == [] and "clean" in text


def test_doctor_compiled_in_lightning(tmp_path):
    m = net()
    compiled = {"model._orig_mod." + k: v for k, v in m.state_dict().items()}
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    path = tmp_path / "epoch=0.ckpt"
    torch.save({"epoch": 0, "global_step": 10, "pytorch-lightning_version": "2.1.0",
                "state_dict": compiled, "optimizer_states": [opt.state_dict()],
                "lr_schedulers": []}, path)
    keys, text = doctor_keys(path)
    assert keys["root"] == "state_dict."
    assert [(w["segment"], w["keys"], w["leading"]) for w in keys["wrappers"]] == \
        [("_orig_mod.", 4, False)]
    assert keys["fix"] == "--replace '_orig_mod.='"
    loaded = torch.load(path)
    apply_python_fix(keys["fix_python"], loaded)
    assert sorted(loaded["state_dict"]) == sorted("model." + k for k in m.state_dict())


def test_doctor_ddp_compiled_under_model_state_dict(tmp_path):
    m = net()
    sd = {"module._orig_mod." + k: v for k, v in m.state_dict().items()}
    path = tmp_path / "t.pt"
    torch.save({"model_state_dict": sd, "epoch": 1}, path)
    keys, _ = doctor_keys(path)
    assert keys["root"] == "model_state_dict."
    assert sorted(w["segment"] for w in keys["wrappers"]) == ["_orig_mod.", "module."]
    assert keys["fix"] == ("--replace '_orig_mod.=' "
                           "--replace 'model_state_dict.module.=model_state_dict.'")
    loaded = torch.load(path)
    apply_python_fix(keys["fix_python"], loaded)
    net().load_state_dict(loaded["model_state_dict"])


def test_doctor_middle_module_is_a_name(tmp_path):
    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.module = net()
    sd = Holder().state_dict()  # "module.fc.weight": an attribute named module
    path = tmp_path / "h.pt"
    torch.save({"model": {"enc." + k: v for k, v in sd.items()}, "epoch": 1}, path)
    keys, text = doctor_keys(path)
    assert keys["wrappers"] == [] and keys["fix"] is None
