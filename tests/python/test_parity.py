"""One verdict for one question: `ckpt match FILE --expect manifest.json
--normalize` (the CLI, manifest from ckpt.manifest(model)) and
ckpt.load_state_dict(model, FILE) (Python) must agree on every checkpoint
(issue 13): complete or not, and the same missing, unexpected, tied and
mismatched keys.

Inputs: every checkpoint the key-audit tests build (tests/keys/gen_pairs.py,
each against a model of each), every checkpoint of the interop set
(tests/interop/gen_checkpoints.py, each against its own model and against
that model with an extra key tied to one of its own), a tied-embedding
model saved the Hugging Face way, and random small models with random ties
and wrapper prefixes (fixed seed)."""
import json
import os
import random
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.nn as nn

import ckpt

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
CLI = os.environ.get("CKPT_BIN")
sys.path.insert(0, os.path.join(TESTS, "keys"))
from gen_pairs import safetensors  # noqa: E402 (the safetensors package may be absent)

pytestmark = pytest.mark.skipif(not CLI, reason="CKPT_BIN (the ckpt CLI) is not set")


def generated(script, outdir):
    # cwd: a directory without a folder named "torch" in it (gen_pairs.py)
    # the generators are written for Debian's python3 (torch 1.13)
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    subprocess.run([py, os.path.join(TESTS, script), outdir], check=True,
                   capture_output=True, cwd=outdir)
    return sorted(os.path.join(outdir, f) for f in os.listdir(outdir)
                  if not f.endswith(".json"))


@pytest.fixture(scope="module")
def keys_set():
    with tempfile.TemporaryDirectory(prefix="ckpt-parity-keys-") as d:
        yield generated("keys/gen_pairs.py", d)


@pytest.fixture(scope="module")
def interop_set():
    with tempfile.TemporaryDirectory(prefix="ckpt-parity-interop-") as d:
        yield generated("interop/gen_checkpoints.py", d)


def model_of(tensors):
    """A module whose state_dict() is `tensors` ({name: tensor}; tensors
    that are one object stay one: tied), as buffers in a tree of submodules
    built from the names' segments (set through _modules/_buffers, so names
    such as "state_dict" are fine). None when the names cannot form a tree
    (an empty segment, a name both a leaf and a prefix)."""
    from ckpt._module import _tie_key
    root, copies = nn.Module(), {}
    for name, t in tensors.items():
        # a writable copy (an expanded view cannot be loaded into), one per
        # tensor, so tied names stay one
        t = copies.setdefault(_tie_key(t), t.clone())
        parts = name.split(".")
        if "" in parts:
            return None
        m = root
        for p in parts[:-1]:
            if p in m._buffers:
                return None
            m = m._modules.setdefault(p, nn.Module())
        if parts[-1] in m._modules:
            return None
        m._buffers[parts[-1]] = t
    return root


def cli_verdict(path, model, tmp):
    spec = os.path.join(tmp, "manifest.json")
    with open(spec, "w") as fh:
        json.dump(ckpt.manifest(model), fh)
    p = subprocess.run([CLI, "match", path, "--expect", spec, "--normalize", "--json"],
                       capture_output=True, text=True)
    if p.returncode == 2:
        return ("error",)
    r = json.loads(p.stdout)
    assert p.returncode == (0 if r["complete"] else 1), p.stdout
    return (r["complete"], sorted(r["missing_keys"]), sorted(r["unexpected_keys"]),
            sorted((t["name"], t["tied_to"]) for t in r["tied"]),
            sorted(m["name"] for m in r["shape_mismatch"]),
            sorted(m["name"] for m in r["dtype_mismatch"]))


def py_verdict(path, model):
    try:
        rep = ckpt.load_state_dict(model, path)
    except ckpt.KeyMismatchError as e:
        rep = e.report
    except ckpt.Error:
        return ("error",)
    return (rep.complete, sorted(rep.missing), sorted(rep.unexpected), sorted(rep.tied),
            sorted(m.name for m in rep.shape_mismatch),
            sorted(m.name for m in rep.dtype_mismatch))


def tensors_of(path):
    """The tensors of a checkpoint as Python's ckpt.load gives them
    (shared storages stay shared), by flattened name; None if unreadable."""
    try:
        obj = ckpt.load(path)
    except ckpt.Error:
        return None
    out = {}

    def walk(v, prefix):
        if isinstance(v, torch.Tensor):
            out[".".join(prefix)] = v
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, prefix + (str(k),))
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(x, prefix + (str(i),))
    walk(obj, ())
    return out


def agree(path, tensors, tmp):
    model = model_of(tensors)
    if model is None:
        return None
    cli = cli_verdict(path, model, tmp)
    py = py_verdict(path, model_of(tensors))
    assert cli == py, "%s:\n  cli:    %r\n  python: %r" % (os.path.basename(path), cli, py)
    return cli


def test_keys_set_every_file_against_every_model(keys_set, tmp_path):
    models = {p: tensors_of(p) for p in keys_set}
    verdicts = []
    for spec, tensors in models.items():
        if not tensors:
            continue
        for path in keys_set:
            verdicts.append(agree(path, tensors, str(tmp_path)))
    done = [v for v in verdicts if v is not None]
    assert len(done) >= 300, len(done)
    # both verdicts occur, and ties were exercised
    assert any(v[0] is True for v in done) and any(v[0] is False for v in done)
    assert any(v[0] is True and v[3] for v in done)


def test_interop_set_own_model_and_tied_extra(interop_set, tmp_path):
    checked = tied = 0
    for path in interop_set:
        tensors = tensors_of(path)
        if not tensors:
            continue
        if agree(path, tensors, str(tmp_path)) is not None:
            checked += 1
        # an extra name the model ties to its first tensor: filled through it
        first = next(iter(tensors))
        extra = dict(tensors)
        extra["tied_extra_key"] = tensors[first]
        v = agree(path, extra, str(tmp_path))
        if v is not None and v[0] is not False:
            tied += 1
            # the partner: the smallest name of first's tie group
            assert v[0] == "error" or any(
                n == "tied_extra_key" and tensors[p] is tensors[first] for n, p in v[3]), v
    assert checked >= 15 and tied >= 10, (checked, tied)


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.body = nn.Linear(8, 8)
        self.lm_head = nn.Linear(8, 16, bias=False)
        self.lm_head.weight = self.embed.weight  # tie_weights()


def test_tied_embedding_saved_the_hugging_face_way(tmp_path):
    torch.manual_seed(0)
    src = TiedLM()
    man = ckpt.manifest(src)
    assert man["ties"] == [["embed.weight", "lm_head.weight"]]
    st = str(tmp_path / "model.safetensors")
    sd = src.state_dict()
    del sd["lm_head.weight"]  # the tied weight stored once
    # safetensors' save_model: the dropped alias recorded in __metadata__
    safetensors(st, sd, {"format": "pt", "lm_head.weight": "embed.weight"})
    pt = str(tmp_path / "pytorch_model.bin")
    torch.save(sd, pt)
    spec = str(tmp_path / "manifest.json")
    with open(spec, "w") as fh:
        json.dump(man, fh)
    for path in (st, pt):
        p = subprocess.run([CLI, "match", path, "--expect", spec, "--json"],
                           capture_output=True, text=True)
        r = json.loads(p.stdout)
        assert p.returncode == 0 and r["complete"] and r["missing_keys"] == []
        assert r["matched"] == 3
        assert r["tied"] == [{"name": "lm_head.weight", "tied_to": "embed.weight"}]
        text = subprocess.run([CLI, "match", path, "--expect", spec],
                              capture_output=True, text=True).stdout
        assert text.startswith("COMPLETE: 3 of 4 expected keys match, 1 tied to a matched key")
        dst = TiedLM()
        rep = ckpt.load_state_dict(dst, path)
        assert rep.complete and rep.missing == () and \
            rep.tied == (("lm_head.weight", "embed.weight"),)
        assert torch.equal(dst.lm_head.weight, src.embed.weight)
        assert dst.lm_head.weight is dst.embed.weight
    # without the ties the same file is missing a key: the manifest is what says so
    del man["ties"]
    with open(spec, "w") as fh:
        json.dump(man, fh)
    r = json.loads(subprocess.run([CLI, "match", pt, "--expect", spec, "--json"],
                                  capture_output=True, text=True).stdout)
    assert not r["complete"] and r["missing_keys"] == ["lm_head.weight"]


class UntiedLM(TiedLM):
    def __init__(self):
        super().__init__()
        self.lm_head.weight = nn.Parameter(self.embed.weight.detach().clone() + 1)


@pytest.mark.parametrize("dtype", [None, torch.float32])
def test_tie_the_checkpoint_declares_and_the_model_does_not_make(tmp_path, dtype):
    """save_model's alias (lm_head.weight = embed.weight) against a model
    with a head of its own: one verdict, missing with the tie named, as a
    loader that ignores the metadata (torch's strict load_state_dict,
    safetensors load_model) leaves lm_head at its init."""
    torch.manual_seed(0)
    sd = TiedLM().state_dict()
    del sd["lm_head.weight"]
    st = str(tmp_path / "model.safetensors")
    safetensors(st, sd, {"format": "pt", "lm_head.weight": "embed.weight"})
    tie = (("lm_head.weight", "embed.weight"),)
    dst = UntiedLM()
    with pytest.raises(ckpt.KeyMismatchError) as e:
        ckpt.load_state_dict(dst, st, dtype=dtype)
    rep = e.value.report
    assert (rep.complete, rep.missing, rep.tied, rep.declared_ties) == \
        (False, ("lm_head.weight",), tie, tie)
    assert "declared tied by the checkpoint, not by the model (left at their init): " \
        "lm_head.weight = embed.weight" in rep.summary(), rep.summary()
    assert cli_verdict(st, dst, str(tmp_path)) == py_verdict(st, dst)
    import inspect
    kws = [{"strict": False}, {"allow_missing": ["lm_head.weight"]}]
    if "assign" in inspect.signature(nn.Module.load_state_dict).parameters:  # torch >= 2.1
        kws.append({"strict": False, "assign": True})
    for kw in kws:
        dst = UntiedLM()
        before = dst.lm_head.weight.detach().clone()
        with pytest.warns(ckpt.DeclaredTieWarning, match="lm_head.weight = embed.weight"):
            rep = ckpt.load_state_dict(dst, st, dtype=dtype, **kw)
        assert rep.declared_ties == tie
        assert torch.equal(dst.embed.weight, sd["embed.weight"])
        # nothing fills lm_head, and an assign does not tie it either
        assert torch.equal(dst.lm_head.weight, before)
        assert dst.lm_head.weight is not dst.embed.weight


# ---------------------------------------------------------------- property

WRAPPERS = ["", "module.", "_orig_mod.", "module._orig_mod.", "_orig_mod.module."]


def random_model(rng):
    """A few Linear/Embedding/LayerNorm layers, some of them nested, with
    random ties between parameters of one shape."""
    m = nn.Module()
    layers = []
    d = rng.choice([3, 4])
    for i in range(rng.randint(2, 6)):
        kind = rng.choice(["linear", "embed", "norm"])
        layer = {"linear": lambda: nn.Linear(d, d, bias=rng.random() < 0.5),
                 "embed": lambda: nn.Embedding(d, d),
                 "norm": lambda: nn.LayerNorm(d)}[kind]()
        parent = m if rng.random() < 0.6 else m._modules.setdefault("block", nn.Module())
        parent.add_module("l%d" % i, layer)
        layers.append(layer)
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        a, b = rng.sample(layers, 2)
        if hasattr(a, "weight") and hasattr(b, "weight") and a.weight.shape == b.weight.shape:
            b.weight = a.weight
    return m


@pytest.mark.parametrize("seed", range(40))
def test_property_cli_and_python_agree(seed, tmp_path):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = random_model(rng)
    sd = model.state_dict()
    groups = ckpt.manifest(model)["ties"]
    action = rng.choice(["plain", "drop_tied", "drop_any", "extra", "drop_tied"])
    if action == "drop_tied" and groups:
        for g in groups:
            for name in g[1:]:
                del sd[name]
    elif action == "drop_any":  # a key no tie fills
        del sd[rng.choice([k for k in sd if not any(k in g for g in groups)])]
    elif action == "extra":
        sd["surplus.weight"] = torch.zeros(2)
    prefix = rng.choice(WRAPPERS)
    sd = {prefix + k: v for k, v in sd.items()}
    if rng.random() < 0.5:
        path = str(tmp_path / "ckpt.pt")
        torch.save(sd, path)
    else:
        path = str(tmp_path / "ckpt.safetensors")
        safetensors(path, sd, {"format": "pt"})  # shared tensors written twice
    cli = cli_verdict(path, model, str(tmp_path))
    py = py_verdict(path, model)
    assert cli == py, "seed %d (%s, %r):\n  cli:    %r\n  python: %r" % (
        seed, action, prefix, cli, py)
    if action == "drop_tied" and groups:
        assert cli[0] is True and cli[3], cli
    if action in ("drop_any", "extra"):
        assert cli[0] is False, cli
