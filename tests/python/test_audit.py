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


def test_doctor_names_wrappers_outermost_first(tmp_path):
    """torch.compile over DDP saves '_orig_mod.module.' keys: the headline
    and the wrapper list name '_orig_mod.' first, as the keys hold them, and
    the strips in the order that leaves the bare keys; DDP over compile the
    other way round."""
    for outer, inner, strips in (
            ("_orig_mod.", "module.", "strip '_orig_mod.', then strip 'module.'"),
            ("module.", "_orig_mod.", "drop '_orig_mod.', then strip 'module.'")):
        path = tmp_path / "w.pt"
        torch.save({outer + inner + k: v for k, v in net().state_dict().items()}, path)
        keys, text = doctor_keys(path)
        assert [(w["segment"], w["leading"]) for w in keys["wrappers"]] == \
            [(outer, True), (inner, False)]
        assert text.splitlines()[0] == (
            "ATTENTION: keys: '%s' then '%s' on 4 keys (outermost first); bare keys: %s"
            % (outer, inner, strips)), text
        scope = {"sd": torch.load(path)}
        exec(keys["fix_python"], {}, scope)
        net().load_state_dict(scope["sd"])


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


# ------------------------------------------------------------ resume


def trained(opt_cls, **kw):
    m = net()
    opt = opt_cls(m.parameters(), lr=0.01, **kw)
    for _ in range(2):
        opt.zero_grad()
        m(torch.randn(4, 3)).sum().backward()
        opt.step()
    return m, opt


def snapshot(m, opt):
    return ({k: v.clone() for k, v in m.state_dict().items()},
            repr(opt.state_dict()["param_groups"]), repr(opt.state_dict()["state"]))


OPTIMIZERS = {
    "Adam": (torch.optim.Adam, {}),
    "AdamW": (torch.optim.AdamW, {}),
    "SGD": (torch.optim.SGD, {"momentum": 0.9}),
    "Adagrad": (torch.optim.Adagrad, {}),
}


@pytest.mark.parametrize("saved,live", [
    ("Adam", "SGD"), ("Adam", "AdamW"), ("Adam", "Adagrad"),
    ("SGD", "Adam"), ("AdamW", "Adam"), ("Adagrad", "Adam")])
def test_resume_refuses_another_optimizer(tmp_path, saved, live):
    import ckpt
    m, opt = trained(*OPTIMIZERS[saved][:1], **OPTIMIZERS[saved][1])
    store = ckpt.Store(tmp_path / "run")
    store.commit({"model": m, "optimizer": opt}, step=2)
    m2, opt2 = trained(*OPTIMIZERS[live][:1], **OPTIMIZERS[live][1])
    before = snapshot(m2, opt2)
    with pytest.raises(ckpt.ResumeError) as e:
        store.resume(m2, opt2)
    cls = OPTIMIZERS[saved][0]
    assert "saved from %s.%s" % (cls.__module__, cls.__qualname__) in str(e.value)
    assert "allow_warm_start=True" in str(e.value)
    assert e.value.verdict == "optimizer-mismatch"
    after = snapshot(m2, opt2)
    assert before[1:] == after[1:]
    assert all(torch.equal(before[0][k], after[0][k]) for k in before[0])
    # the deliberate warm start: model restored, optimizer fresh, and it steps
    with pytest.warns(ckpt.ResumeWarning, match="warm start as asked"):
        r = store.resume(m2, opt2, allow_warm_start=True)
    assert "optimizer" not in r.restored and "model" in r.restored
    assert all(torch.equal(m.state_dict()[k], m2.state_dict()[k]) for k in before[0])
    m2(torch.randn(4, 3)).sum().backward()
    opt2.step()


@pytest.mark.parametrize("name", ["Adam", "SGD", "Adagrad"])
def test_resume_same_optimizer_and_back(tmp_path, name):
    import ckpt
    cls, kw = OPTIMIZERS[name]
    m, opt = trained(cls, **kw)
    store = ckpt.Store(tmp_path / "run")
    store.commit({"model": m, "optimizer": opt}, step=2)
    m2, opt2 = trained(cls, **kw)
    r = store.resume(m2, opt2)
    assert r.restored[:2] == ("model", "optimizer")
    m2(torch.randn(4, 3)).sum().backward()
    opt2.step()


def test_resume_misfit_by_structure_groups_and_shapes():
    from ckpt._store import _optimizer_misfit
    m, adam = trained(torch.optim.Adam)
    sd = adam.state_dict()
    _, sgd = trained(torch.optim.SGD, momentum=0.9)
    why = _optimizer_misfit(sd, sgd, None)  # no class recorded: by its state
    assert why.startswith("its state is Adam/AdamW state (exp_avg, exp_avg_sq, step)"), why
    assert _optimizer_misfit(sd, trained(torch.optim.AdamW)[1], None) is None
    _, fresh_sgd = trained(torch.optim.SGD)  # fresh: groups lack Adam's hyperparameters
    why = _optimizer_misfit(sd, fresh_sgd, None)
    assert why is not None
    two = torch.optim.Adam([{"params": list(m.fc.parameters())},
                            {"params": list(m.out.parameters())}])
    assert _optimizer_misfit(sd, two, None) == "it has 1 param group, the live optimizer 2"
    few = torch.optim.Adam(m.fc.parameters())
    assert _optimizer_misfit(sd, few, None) == \
        "param group 0 has 4 parameters, the live optimizer's 2"
    other = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
    why = _optimizer_misfit(sd, torch.optim.Adam(other.parameters()), None)
    assert why == "state 'exp_avg' of parameter 2 is [1, 2], the parameter is [2, 2]", why


def test_meta_json_round_trip(tmp_path):
    import ckpt
    meta = {"config": {"layers": 2, "act": "gelu"}, "epoch": 3, "lr": 0.5, "name": "run",
            "tags": ["a", "b"], "none": None}
    for ext in (".pt", ".safetensors"):
        p = tmp_path / ("m" + ext)
        ckpt.save({"w": torch.ones(2)}, p, meta=meta)
        got = ckpt.metadata(p)
        assert {k: got[k] for k in meta} == meta
        assert json.loads(got["ckpt.meta_json"]) == [
            "config", "epoch", "lr", "tags", "none",  # then what ckpt.save records itself
            "ckpt.device", "ckpt.dtype", "ckpt.versions"]
    # safetensors' __metadata__ stays str to str: the JSON value as text
    raw = (tmp_path / "m.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])["__metadata__"]
    assert all(isinstance(v, str) for v in header.values())
    assert header["config"] == '{"act": "gelu", "layers": 2}' and header["name"] == "run"
    with pytest.raises(ckpt.InvalidArgumentError, match="reserved"):
        ckpt.save({"w": torch.ones(2)}, tmp_path / "x.pt", meta={"ckpt.meta_json": "[]"})
    with pytest.raises(ckpt.InvalidArgumentError, match="JSON-encodable"):
        ckpt.save({"w": torch.ones(2)}, tmp_path / "x.pt", meta={"o": object()})


# ------------------------------------------------------------ counting


def test_convert_and_rename_count_keys_and_tensors_alike(tmp_path):
    emb = torch.nn.Embedding(5, 3)
    head = torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight  # tied: one tensor, two keys
    m = torch.nn.ModuleDict({"embed": emb, "head": head, "norm": torch.nn.LayerNorm(3)})
    src = tmp_path / "tied.pt"
    torch.save(m.state_dict(), src)

    def out(*args):
        p = subprocess.run([BIN] + [str(a) for a in args], capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout.decode()
    st = tmp_path / "tied.safetensors"
    assert out("convert", src, st) == \
        "wrote %s (safetensors, 4 keys, 3 tensors, %d bytes)\n" % (st, st.stat().st_size)
    pt = tmp_path / "back.pt"
    assert out("convert", st, pt) == \
        "wrote %s (torch-zip, 4 keys, 3 storages, %d bytes)\n" % (pt, pt.stat().st_size)
    assert out("rename", src, tmp_path / "r.pt", "--add-prefix", "model.") == \
        "renamed 4 of 4 keys: %s\n" % (tmp_path / "r.pt")


def test_ignored_entries_are_the_cli_match_list(tmp_path):
    # regression: from a training .pt the Python audit said "other
    # top-level entries ignored: optimizer, rng" (tensor entries only) while
    # `ckpt match` listed optimizer, rng, scheduler, step
    import ckpt
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(torch.randn(2, 4)).sum().backward()
    opt.step()
    sch = torch.optim.lr_scheduler.StepLR(opt, 2)
    train = tmp_path / "train.pt"
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(),
                "rng": torch.get_rng_state(), "scheduler": sch.state_dict(), "step": 7}, train)
    model = tmp_path / "model.pt"
    torch.save(m.state_dict(), model)
    out = subprocess.run([BIN, "match", str(train), "--expect", str(model), "--normalize",
                          "--json"], capture_output=True, text=True)
    cli = json.loads(out.stdout)
    assert cli["ignored_top_level"] == ["optimizer", "rng", "scheduler", "step"]
    # our own file (torch 1.13's weights_only unpickler lacks BINFLOAT)
    for src in (str(train), torch.load(train, weights_only=False)):
        rep = ckpt.load_state_dict(torch.nn.Linear(4, 3), src)
        assert rep.ignored == tuple(cli["ignored_top_level"])
        assert rep.rewrite == cli["rewrite"]["description"]
