"""ckpt.open (safetensors' safe_open habits for every format), and
load_state_dict's dtype=, torch's missing_keys/unexpected_keys names and
the warning about a key rewrite left unapplied."""
import os
import pickle
import warnings

import pytest
import torch

import ckpt


def _state():
    g = torch.Generator().manual_seed(0)
    return {"layers.0.weight": torch.randn(4, 3, generator=g),
            "layers.0.bias": torch.arange(4, dtype=torch.int64),
            "layers.1.weight": torch.randn(2, 4, generator=g).to(torch.bfloat16)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("open")
    state = _state()
    out = {}
    out["torch-zip"] = str(d / "m.pt")
    torch.save(state, out["torch-zip"])
    out["torch-legacy"] = str(d / "legacy.pt")
    torch.save(state, out["torch-legacy"], _use_new_zipfile_serialization=False)
    out["safetensors"] = str(d / "m.safetensors")
    ckpt.save(state, out["safetensors"], meta={"note": "hi"})
    out["pickle"] = str(d / "m.pkl")
    with open(out["pickle"], "wb") as fh:
        pickle.dump({k: v.float().numpy() if v.is_floating_point() else v.numpy()
                     for k, v in state.items()}, fh, protocol=2)
    return state, out


@pytest.mark.parametrize("fmt", ["torch-zip", "torch-legacy", "safetensors"])
def test_open_every_format(files, fmt):
    state, paths = files
    with ckpt.open(paths[fmt]) as f:
        assert f.format() == fmt
        assert f.keys() == sorted(state)
        for name, want in state.items():
            got = f.get_tensor(name)
            assert got.dtype == want.dtype and torch.equal(got, want), name
        s = f.get_slice("layers.0.weight")
        assert s.get_shape() == [4, 3] and s.get_dtype() == "F32"
        part = s[1:3, ::2]
        assert torch.equal(part, state["layers.0.weight"][1:3, ::2])
        assert torch.equal(f.get_slice("layers.1.weight")[-1],
                           state["layers.1.weight"][-1])
        with pytest.raises(KeyError):
            f.get_tensor("nope")


def test_open_numpy_pickle(files):
    state, paths = files
    with ckpt.open(paths["pickle"]) as f:
        assert f.format() == "pickle"
        assert f.keys() == sorted(state)
        assert torch.equal(f.get_tensor("layers.0.bias"), state["layers.0.bias"])


def test_open_metadata(files):
    _, paths = files
    with ckpt.open(paths["safetensors"]) as f:
        assert f.metadata()["note"] == "hi"
    # torch.save writes none
    with ckpt.open(paths["torch-zip"]) as f:
        assert f.metadata() is None


def test_pt_metadata_record_is_an_object_of_unique_strings(tmp_path):
    """The metadata record ckpt.save writes into a .pt (extra/ckpt_meta.json)
    is read as one JSON object of strings, keys unique, nothing after it;
    anything else fails the open naming the member and the byte."""
    import io
    import zipfile
    path = tmp_path / "m.pt"
    ckpt.save({"w": torch.ones(2)}, path)

    def with_record(text):
        out = io.BytesIO()
        with zipfile.ZipFile(path) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
            for info in zin.infolist():
                data = zin.read(info)
                zout.writestr(info.filename, text if info.filename.endswith(
                    "/extra/ckpt_meta.json") else data)
        p = tmp_path / "edited.pt"
        p.write_bytes(out.getvalue())
        return p
    assert "ckpt.xxh3" in ckpt.metadata(path)
    assert ckpt.metadata(with_record(b' {"a": "x\\u00e9\\n", "b": ""} ')) == {"a": "x\u00e9\n", "b": ""}
    assert ckpt.metadata(with_record(b"{}")) == {}
    for text, why in [(b'{"a": "1", "a": "2"}', "unique keys"), (b'{"a": 1}', 'value of "a" is not'),
                      (b'{"a": {"b": "c"}}', 'value of "a" is not'), (b'["a"]', "not a JSON object"),
                      (b'{"a": "1"} x', "the end after the object"), (b'{"a": "\xff"}', "UTF-8"),
                      (b'{"a": "1",}', "expected a string"), (b"", "not a JSON object")]:
        with pytest.raises(ckpt.FormatError) as exc:
            ckpt.metadata(with_record(text))
        assert why in str(exc.value) and exc.value.member.endswith("/extra/ckpt_meta.json"), text


def test_open_metadata_of_sharded_set(files, tmp_path):
    """A sharded set's metadata is its index's "metadata" (what transformers
    reads as sharded_metadata), values that are not str as JSON text, the
    same through ckpt.open, ckpt.metadata and `ckpt inspect --json`, for
    the index and for its folder; each shard's own __metadata__ ({"format":
    "pt"}, as save_pretrained writes it) is the shard's, not the set's."""
    import json
    import subprocess
    state, _ = files
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[:2],
              "model-00002-of-00002.safetensors": names[2:]}
    for shard, keys in shards.items():
        ckpt.save({k: state[k] for k in keys}, str(tmp_path / shard), meta={"format": "pt"})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({
        "metadata": {"total_size": 116, "note": {"a": [1, 2]}},
        "weight_map": {k: shard for shard, keys in shards.items() for k in keys}}))
    want = {"total_size": "116", "note": '{"a":[1,2]}'}  # compact JSON text
    for path in (str(index), str(tmp_path)):
        with ckpt.open(path) as f:
            assert f.metadata() == want, path
        assert ckpt.metadata(path) == want, path
        out = subprocess.run([os.environ["CKPT_BIN"], "inspect", "--json", path],
                             capture_output=True, text=True, check=True).stdout
        assert json.loads(out)["metadata"] == want, path
    with ckpt.open(str(tmp_path / "model-00001-of-00002.safetensors")) as f:
        got = f.metadata()
        assert got["format"] == "pt" and "total_size" not in got, got
    # an index without "metadata": the set has none (None, not {})
    index.write_text(json.dumps({"weight_map": {k: shard for shard, keys in shards.items()
                                                for k in keys}}))
    with ckpt.open(str(index)) as f:
        assert f.metadata() is None


def test_open_closed_and_errors(files, tmp_path):
    _, paths = files
    f = ckpt.open(paths["torch-zip"])
    t = f.get_tensor("layers.0.weight")
    f.close()
    assert t.sum().item() == _state()["layers.0.weight"].sum().item()  # still valid
    with pytest.raises(ckpt.InvalidArgumentError):
        f.keys()
    with pytest.raises(ckpt.InvalidArgumentError):
        ckpt.open(paths["torch-zip"], framework="np")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"abc")
    with pytest.raises(ckpt.FormatError):
        ckpt.open(str(bad))


def test_open_never_executes(tmp_path):
    class Boom:
        def __reduce__(self):
            return (os.system, ("touch %s" % (tmp_path / "ran"),))
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "x": Boom()}, str(path))
    with ckpt.open(str(path)) as f:
        assert f.keys() == ["w"]
        assert torch.equal(f.get_tensor("w"), torch.ones(2))
    assert not (tmp_path / "ran").exists()


def test_report_has_torch_names():
    m = torch.nn.Linear(2, 3)
    r = ckpt.load_state_dict(m, {"weight": torch.ones(3, 2), "extra": torch.ones(1)},
                             strict=False)
    assert r.missing_keys == ["bias"] and r.unexpected_keys == ["extra"]
    missing, unexpected = r  # as torch's _IncompatibleKeys unpacks
    assert (missing, unexpected) == (["bias"], ["extra"])
    assert r[0] == ["bias"] and r._fields == ("missing_keys", "unexpected_keys")
    torch_r = torch.nn.Linear(2, 3).load_state_dict(
        {"weight": torch.ones(3, 2), "extra": torch.ones(1)}, strict=False)
    assert tuple(r) == tuple(torch_r)


def test_load_state_dict_dtype_casts_deliberately():
    m = torch.nn.Linear(2, 3)
    half = {"weight": torch.full((3, 2), 0.5, dtype=torch.float16),
            "bias": torch.full((3,), 2.0, dtype=torch.float16)}
    with pytest.raises(ckpt.KeyMismatchError) as e:
        ckpt.load_state_dict(m, half)
    assert [d.name for d in e.value.report.dtype_mismatch] == ["bias", "weight"]
    r = ckpt.load_state_dict(m, half, dtype=torch.float32)
    assert r.complete and m.weight.dtype == torch.float32
    assert torch.equal(m.bias.detach(), torch.full((3,), 2.0))
    with pytest.raises(ckpt.InvalidArgumentError):
        ckpt.load_state_dict(m, half, dtype=torch.int32)


def test_strict_false_names_the_unapplied_rewrite():
    m = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 3))
    sd = {"module.0.weight": torch.ones(3, 2), "module.0.bias": torch.ones(3),
          "1.bias": torch.ones(3), "module.junk": torch.ones(1)}
    with pytest.warns(ckpt.UnappliedRewriteWarning, match="strip 'module.'") as w:
        r = ckpt.load_state_dict(m, sd, strict=False)
    assert "3 keys left missing (0.bias, 0.weight, 1.weight)" in str(w[0].message)
    assert r.rewrite is None and r.unapplied_rewrite == "strip 'module.'"
    # every checkpoint key matching through it (tryout F9): strict=False
    # applies it, naming what stays missing; strict=True says so
    del sd["module.junk"]
    sd["module.1.bias"] = sd.pop("1.bias")
    with pytest.warns(ckpt.PartialRewriteWarning, match="1 model key left missing: 1.weight"):
        r = ckpt.load_state_dict(m, sd, strict=False)
    assert r.rewrite == "strip 'module.'" and r.missing == ("1.weight",)
    # the error names it too: a DDP + torch.compile state dict short of one
    # key said only "missing: ...; unexpected: module._orig_mod....; nothing
    # would load"
    dp = {"module._orig_mod." + k: v for k, v in m.state_dict().items() if k != "1.bias"}
    with pytest.raises(ckpt.KeyMismatchError) as e:
        ckpt.load_state_dict(m, dp)
    assert "rewrite strip 'module._orig_mod.' not applied: every checkpoint key matches " \
        "through it, leaving the model's 1.bias missing; strict=False applies it" \
        in str(e.value), str(e.value)
    dp["module._orig_mod.junk"] = torch.ones(1)
    for strict in (True, False):
        with pytest.raises(ckpt.KeyMismatchError) as e:
            ckpt.load_state_dict(m, dp, strict=strict)
        assert "rewrite strip 'module._orig_mod.' not applied (normalize=True applies a " \
            "rewrite only when it makes the match complete)" in str(e.value), str(e.value)
    # nothing to say when every key loads
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ckpt.load_state_dict(m, {k: v for k, v in m.state_dict().items()}, strict=False)
