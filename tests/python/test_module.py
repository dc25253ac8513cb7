"""Real torch models: ckpt.audit (the plain-attribute trap), ckpt.manifest,
and ckpt.load_state_dict (plain, DataParallel and torch.compile key
layouts; an incomplete checkpoint refused with the exact report and the
model left untouched)."""
import inspect
import json
import os
import subprocess
import warnings

import pytest

import ckpt

torch = pytest.importorskip("torch")
nn = torch.nn


class Rope(nn.Module):
    """Rotary embedding that caches its cos/sin tables as plain attributes:
    they are not in state_dict(), so no checkpoint holds them."""

    def __init__(self, dim=8, positions=16):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(positions).float(), inv)
        self.cos_cached = angles.cos()
        self.sin_cached = angles.sin()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(8, 8)
        self.rope = Rope()
        self.register_buffer("mask", torch.ones(4, 4).tril(), persistent=False)


class Net(nn.Module):
    def __init__(self, hidden=32, out=4, extra=True):
        super().__init__()
        self.fc1 = nn.Linear(16, hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, out)
        if extra:
            self.fc3 = nn.Linear(out, out)


def fresh(seed, **kw):
    torch.manual_seed(seed)
    return Net(**kw)


def snapshot(m):
    return {k: v.clone() for k, v in m.state_dict().items()}


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_audit_reports_the_plain_attribute_trap(tmp_path):
    m = nn.Sequential(Block(), Block())
    found = ckpt.audit(m)
    plain = sorted(n for f in found if f.kind == "plain-attribute" for n in f.names)
    assert plain == ["0.rope.cos_cached", "0.rope.sin_cached",
                     "1.rope.cos_cached", "1.rope.sin_cached"]
    nonp = sorted(n for f in found if f.kind == "non-persistent-buffer" for n in f.names)
    assert nonp == ["0.mask", "1.mask"]
    assert "F32 [16, 4]" in [f for f in found if f.names == ("0.rope.cos_cached",)][0].message
    # ckpt.save says so, and indeed the file lacks the tables
    path = tmp_path / "rope.safetensors"
    with pytest.warns(ckpt.AuditWarning) as rec:
        ret = ckpt.save(m, path)
    text = str(rec[0].message)
    assert "0.rope.cos_cached" in text and "1.rope.sin_cached" in text and "0.mask" in text
    assert ret == found
    assert sorted(ckpt.load(path)) == ["0.attn.bias", "0.attn.weight", "1.attn.bias",
                                       "1.attn.weight"]


def test_audit_tied_and_mixed_dtypes():
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 6)
            self.head = nn.Linear(6, 10, bias=False)
            self.head.weight = self.embed.weight
            self.proj = nn.Linear(6, 6)
            self.norm = nn.LayerNorm(6).half()
    found = {f.kind: f for f in ckpt.audit(LM())}
    assert found["tied-parameters"].names == ("embed.weight", "head.weight")
    assert sorted(found["mixed-dtypes"].names) == ["norm.bias", "norm.weight"]
    assert "F32 x3" in found["mixed-dtypes"].message and "F16 x2" in found["mixed-dtypes"].message
    assert ckpt.audit(fresh(0)) == []  # a clean model says nothing


def test_save_warns_of_shared_memory_not_of_a_tie(tmp_path):
    """A tied embedding and head (one Parameter under two names: every
    tied LLM) is what load_state_dict restores: ckpt.save and Store.commit
    return the finding but do not warn (they warned on every such model).
    Two different parameters sharing memory do lose their sharing in a
    model built anew: that still warns, and says so."""
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 6)
            self.head = nn.Linear(6, 10, bias=False)
            self.head.weight = self.embed.weight
    lm = LM()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = ckpt.save(lm, tmp_path / "lm.safetensors")
        ckpt.Store(tmp_path / "store").commit(lm, step=1)
    assert [f.kind for f in found] == ["tied-parameters"]
    assert sorted(ckpt.load(tmp_path / "lm.safetensors")) == ["embed.weight", "head.weight"]
    shared = LM()
    shared.head.weight = nn.Parameter(shared.embed.weight.data)  # same memory, two parameters
    assert [f.kind for f in ckpt.audit(shared)] == ["shared-storage"]
    for save in (lambda: ckpt.save(shared, tmp_path / "shared.safetensors"),
                 lambda: ckpt.Store(tmp_path / "store").commit(shared, step=2)):
        with pytest.warns(ckpt.AuditWarning) as rec:
            save()
        text = str(rec[0].message)
        assert "embed.weight, head.weight are 2 different parameters sharing" in text, text
        assert "stop sharing after a reload" in text, text


def test_manifest_matches_state_dict_and_cli(tmp_path):
    m = nn.Sequential(Block(), nn.Linear(8, 2).to(torch.bfloat16))
    man = ckpt.manifest(m)
    sd = m.state_dict()
    assert [t["name"] for t in man["tensors"]] == list(sd)
    assert man["tensors"][-1] == {"name": "1.bias", "dtype": "BF16", "shape": [2], "nbytes": 4}
    assert [t["name"] for t in man["non_persistent"]] == ["0.mask"]
    path = tmp_path / "expect.json"
    path.write_text(json.dumps(man))
    cli = os.environ.get("CKPT_BIN")
    if cli and subprocess.run([cli, "help", "match"], capture_output=True).returncode == 0:
        torch.save(sd, tmp_path / "m.pt")
        run = subprocess.run([cli, "match", str(tmp_path / "m.pt"), "--expect", str(path)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr


def test_load_plain(tmp_path):
    src, dst = fresh(1), fresh(2)
    path = tmp_path / "plain.pt"
    torch.save(src.state_dict(), path)
    rep = ckpt.load_state_dict(dst, path)
    assert rep.complete and rep.rewrite is None and not rep.missing and not rep.unexpected
    assert len(rep.matched) == len(src.state_dict())
    assert same(dst.state_dict(), src.state_dict())


def test_load_dataparallel_prefixed(tmp_path):
    src, dst = fresh(1), fresh(2)
    sd = nn.DataParallel(src).state_dict()
    assert all(k.startswith("module.") for k in sd)
    path = tmp_path / "dp.pt"
    torch.save(sd, path)
    rep = ckpt.load_state_dict(dst, path)
    assert rep.rewrite == "strip 'module.'"
    assert ("fc1.weight", "module.fc1.weight") in rep.matched
    assert same(dst.state_dict(), src.state_dict())
    with pytest.raises(ckpt.KeyMismatchError):  # no rewrite without normalize
        ckpt.load_state_dict(fresh(3), path, normalize=False)


def test_load_compiled_prefixed(tmp_path):
    src, dst = fresh(1), fresh(2)
    if hasattr(torch, "compile"):  # torch >= 2: the real OptimizedModule
        sd = torch.compile(src).state_dict()
    else:  # torch 1.13 has no torch.compile: its key layout
        sd = {"_orig_mod." + k: v for k, v in src.state_dict().items()}
    assert all(k.startswith("_orig_mod.") for k in sd)
    path = tmp_path / "compiled.safetensors"
    ckpt.save(sd, path)
    rep = ckpt.load_state_dict(dst, path)
    assert rep.complete and "_orig_mod." in rep.rewrite
    assert same(dst.state_dict(), src.state_dict())


def test_missing_and_resized_layer_refused_untouched(tmp_path):
    src = fresh(1, out=8, extra=False)  # fc2 resized 32->8, fc3 absent
    dst = fresh(2)
    before = snapshot(dst)
    path = tmp_path / "bad.pt"
    torch.save(src.state_dict(), path)
    with pytest.raises(ckpt.KeyMismatchError) as exc:
        ckpt.load_state_dict(dst, path)
    rep = exc.value.report
    assert not rep.complete
    assert rep.missing == ("fc3.bias", "fc3.weight")
    assert rep.unexpected == ()
    assert [(m.name, m.checkpoint_shape, m.expected_shape) for m in rep.shape_mismatch] == [
        ("fc2.bias", (8,), (4,)), ("fc2.weight", (8, 32), (4, 32))]
    assert rep.dtype_mismatch == ()
    assert sorted(n for n, _ in rep.matched) == [
        "bn.bias", "bn.num_batches_tracked", "bn.running_mean", "bn.running_var",
        "bn.weight", "fc1.bias", "fc1.weight"]
    assert "missing: fc3.bias, fc3.weight" in str(exc.value)
    assert "fc2.weight (checkpoint F32 [8, 32], model F32 [4, 32])" in str(exc.value)
    assert exc.value.code == -9 and exc.value.file == str(path)
    assert same(dst.state_dict(), before)  # nothing was copied
    # strict=False tolerates the missing layer, never the resized one
    with pytest.raises(ckpt.KeyMismatchError):
        ckpt.load_state_dict(dst, path, strict=False)
    assert same(dst.state_dict(), before)


def test_allowed_missing_tied_and_training_checkpoint(tmp_path):
    src, dst = fresh(1), fresh(2)
    sd = src.state_dict()
    del sd["fc3.bias"]
    rep = ckpt.load_state_dict(dst, {"model": sd, "optimizer": {"state": {}, "param_groups": []},
                                     "epoch": 3}, allow_missing=["fc3.b*"])
    assert rep.source == "model" and rep.allowed_missing == ("fc3.bias",)
    assert torch.equal(dst.fc1.weight, src.fc1.weight)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 6)
            self.head = nn.Linear(6, 10, bias=False)
            self.head.weight = self.embed.weight
    a, b = LM(), LM()
    saved = {"embed.weight": a.embed.weight.detach()}  # the tied copy dropped
    rep = ckpt.load_state_dict(b, saved)
    assert rep.complete and rep.tied == (("head.weight", "embed.weight"),)
    assert torch.equal(b.head.weight, a.embed.weight)
    # worded as `ckpt match` words it: "1 of 2" alone reads as a key short
    assert str(rep) == "1 of 2 expected keys match, 1 tied to a matched key"
    # a bfloat16 copy: nothing matches, the tie is to a key that loads only
    # cast (it said "0 of 2 match, 1 tied to a matched key")
    with pytest.raises(ckpt.KeyMismatchError) as e:
        ckpt.load_state_dict(b, {"embed.weight": a.embed.weight.detach().bfloat16()})
    assert str(e.value).startswith("0 of 2 expected keys match, 1 tied to a key that loads "
                                   "with a dtype cast; dtype mismatch: embed.weight"), str(e.value)


def test_batchnorm_counter_left_to_the_module_as_torch_does(tmp_path):
    """A state dict without num_batches_tracked (torchvision's weights from
    before BatchNorm's version 2, a plain dict, safetensors) loads with
    torch's strict=True: BatchNorm fills the counter itself unless the
    _metadata gives it version 2. ckpt agrees, under a rewrite too."""
    from collections import OrderedDict
    src = fresh(1)
    full = src.state_dict()

    def saved(version, prefix=""):
        sd = OrderedDict((prefix + k, v) for k, v in full.items()
                         if k != "bn.num_batches_tracked")
        if version is not None:
            sd._metadata = OrderedDict(((prefix + k).rstrip("."), dict(v))
                                       for k, v in full._metadata.items())
            sd._metadata[prefix + "bn"]["version"] = version
        return sd
    for version in (None, 1, 2):
        for prefix in ("", "module."):
            path = tmp_path / "old.pt"
            torch.save({"model": saved(version, prefix)}, path)
            fails = version == 2
            plain = fresh(2)
            loaded = OrderedDict((k[len(prefix):], v) for k, v in saved(version, prefix).items())
            if version is not None:
                loaded._metadata = saved(version)._metadata
            try:
                plain.load_state_dict(loaded)  # torch, the prefix stripped by hand
                assert not fails
            except RuntimeError as e:
                assert fails and 'Missing key(s) in state_dict: "bn.num_batches_tracked"' in str(e)
            dst = fresh(2)
            if fails:
                with pytest.raises(ckpt.KeyMismatchError) as exc:
                    ckpt.load_state_dict(dst, path)
                assert "bn.num_batches_tracked" in exc.value.report.missing
                continue
            rep = ckpt.load_state_dict(dst, path)
            assert rep.complete and rep.missing == () and rep.allowed_missing == ()
            assert rep.defaulted == ("bn.num_batches_tracked",)
            assert str(rep).startswith("10 of 11 expected keys match, 1 filled by BatchNorm "
                                       "as in torch (bn.num_batches_tracked)")
            assert torch.equal(dst.bn.running_mean, src.bn.running_mean)
    # allowed by the caller: listed as allowed, as before
    torch.save(saved(2), path)
    rep = ckpt.load_state_dict(fresh(2), path, allow_missing=["*.num_batches_tracked"])
    assert rep.allowed_missing == ("bn.num_batches_tracked",) and rep.defaulted == ()


def test_bf16_checkpoint_refusal_says_how_to_cast(tmp_path):
    """torch's load_state_dict casts a bf16 state dict into a float32
    model silently; ckpt refuses, and the refusal names the argument that
    casts on purpose."""
    src, dst = fresh(1), fresh(2)
    path = tmp_path / "bf16.pt"
    torch.save(src.to(torch.bfloat16).state_dict(), path)
    with pytest.raises(ckpt.KeyMismatchError) as exc:
        ckpt.load_state_dict(dst, path)
    assert len(exc.value.report.dtype_mismatch) == 10  # num_batches_tracked stays I64
    assert "as torch's load_state_dict would, pass dtype=\"model\"" in str(exc.value)
    # the count is said once, at the head
    assert str(exc.value).startswith("%s: 1 of 11 expected keys match; dtype mismatch: " % path)
    # every key loads with the cast torch's load_state_dict makes: no
    # "almost nothing would load" (it was said)
    assert "nothing would load" not in str(exc.value), str(exc.value)
    assert str(exc.value).endswith(" [CKPT_E_MISMATCH]")
    rep = ckpt.load_state_dict(dst, path, dtype=torch.float32)
    assert rep.complete and torch.equal(dst.fc1.weight, src.fc1.weight.float())
    rep = ckpt.load_state_dict(fresh(2), path, dtype="model")  # the advice works
    assert rep.complete and len(rep.cast) == 10 and rep.lossy_casts == ()
    # a shape mismatch as well: casting would not help, so no such advice
    torch.save(fresh(1, out=8).to(torch.bfloat16).state_dict(), path)
    with pytest.raises(ckpt.KeyMismatchError) as exc:
        ckpt.load_state_dict(fresh(2), path)
    assert exc.value.report.shape_mismatch and "dtype=" not in str(exc.value)


class MixedLM(nn.Module):
    """Tied embedding and head, a Linear, a norm; mixed precision when
    bf16: the Linear in bfloat16, the rest float32."""
    def __init__(self, bf16=False, device=None):
        super().__init__()
        self.embed = nn.Embedding(10, 8, device=device)
        self.fc = nn.Linear(8, 8, device=device)
        self.norm = nn.LayerNorm(8, device=device)
        self.head = nn.Linear(8, 10, bias=False, device=device)
        self.head.weight = self.embed.weight
        if bf16:
            self.fc.to(torch.bfloat16)


def test_mixed_precision_loads_cast_as_torch_does(tmp_path):
    """tryout F6: a mixed-precision model (bf16 Linear, fp32 norm) and an
    fp32 checkpoint: torch's load_state_dict loads it (copy_ casts); ckpt
    refused with dtype=None, bfloat16 and float32 alike, advising
    dtype=torch.bfloat16, which casts the fp32 norm too and fails.
    dtype="model" casts each tensor into its parameter's dtype: the state
    torch's load_state_dict leaves, both directions, a rewrite included;
    the keys cast and those losing precision are in the report."""
    torch.manual_seed(0)
    fp32, bf16 = tmp_path / "fp32.pt", tmp_path / "bf16_ddp.pt"
    torch.save(MixedLM().state_dict(), fp32)
    torch.save({"module." + k: v for k, v in MixedLM(bf16=True).state_dict().items()}, bf16)
    for path, bf16_model in ((fp32, True), (bf16, False)):
        oracle = MixedLM(bf16=bf16_model)
        sd = torch.load(path)
        oracle.load_state_dict({k.replace("module.", "", 1): v for k, v in sd.items()})
        with pytest.raises(ckpt.KeyMismatchError) as e:
            ckpt.load_state_dict(MixedLM(bf16=bf16_model), path)
        if path == fp32:  # the advice is one that works
            assert str(e.value).endswith("pass dtype=\"model\" [CKPT_E_MISMATCH]"), str(e.value)
            with pytest.raises(ckpt.KeyMismatchError):  # what it advised before
                ckpt.load_state_dict(MixedLM(bf16=True), path, dtype=torch.bfloat16)
        for given in (path, ckpt.load(path)):
            m = MixedLM(bf16=bf16_model)
            rep = ckpt.load_state_dict(m, given, dtype="model")
            assert rep.complete and [c.name for c in rep.cast] == ["fc.bias", "fc.weight"]
            got, want = m.state_dict(), oracle.state_dict()
            assert list(got) == list(want)
            for k in want:
                assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
            assert m.head.weight is m.embed.weight
            if path == fp32:  # fp32 into bf16 rounds: said
                assert [c.name for c in rep.lossy_casts] == ["fc.bias", "fc.weight"]
                assert "2 losing precision: fc.bias (F32 to BF16), fc.weight (F32 to BF16)" \
                    in str(rep), str(rep)
            else:  # bf16 into fp32 is exact
                assert rep.lossy_casts == () and rep.rewrite == "strip 'module.'"
    # assign=True (torch >= 2.1): the cast tensors take the parameters'
    # places, in the model's dtypes (torch's assign would keep float32)
    if "assign" in inspect.signature(nn.Module.load_state_dict).parameters:
        m = MixedLM(bf16=True, device="meta")
        ckpt.load_state_dict(m, fp32, dtype="model", assign=True)
        assert (m.fc.weight.dtype, m.norm.weight.dtype) == (torch.bfloat16, torch.float32)
        assert torch.equal(m.fc.weight, oracle_fc_weight(fp32))
    # only floating-point dtypes are cast: an integer buffer stays refused
    b = nn.Module()
    b.register_buffer("x", torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ckpt.KeyMismatchError) as e:
        ckpt.load_state_dict(b, {"x": torch.tensor([1.5, 2.0])}, dtype="model")
    assert e.value.report.dtype_mismatch[0].checkpoint_dtype == "F32"
    assert e.value.report.dtype_mismatch[0].expected_dtype == "I64"


def oracle_fc_weight(path):
    m = MixedLM(bf16=True)
    m.load_state_dict(torch.load(path))
    return m.fc.weight


def test_audit_names_wrapper_prefixes(tmp_path):
    """A DataParallel (or DDP) or torch.compile wrapper saved as is gives
    keys with "module." / "_orig_mod.": ckpt.save said nothing while ckpt
    doctor calls the file ATTENTION."""
    inner = nn.Sequential(nn.Linear(3, 2))
    found = ckpt.audit(nn.DataParallel(inner))
    assert [(f.kind, f.names) for f in found] == [("wrapper-prefix", ("module",))]
    assert "carries 'module.' (module.0.weight)" in found[0].message
    with pytest.warns(ckpt.AuditWarning, match="wrapper"):
        ckpt.save({"model": nn.DataParallel(inner)}, tmp_path / "dp.pt")
    assert ckpt.audit(inner) == []
    if hasattr(torch, "compile"):  # torch >= 2.0
        outer = nn.Sequential(torch.compile(nn.Linear(2, 2)), nn.ReLU())
        found = ckpt.audit(outer)
        assert [(f.kind, f.names) for f in found] == [("wrapper-prefix", ("0._orig_mod",))]
        assert "(0._orig_mod.weight)" in found[0].message


class TiedLM(nn.Module):
    def __init__(self, device=None):
        super().__init__()
        self.embed = nn.Embedding(10, 6, device=device)
        self.norm = nn.LayerNorm(6, device=device)
        self.head = nn.Linear(6, 10, bias=False, device=device)
        self.head.weight = self.embed.weight


def test_meta_model_refused_unless_assign(tmp_path):
    """A model built on the meta device (the way large models are made
    before loading): copying into its parameters does nothing, which torch
    only warns about; ckpt.load_state_dict said the load was complete and
    left the model empty. It refuses now, untouched, and assign=True puts
    the checkpoint's tensors in place of the parameters (torch's assign),
    the tied head included (the checkpoint holds it once)."""
    has_assign = "assign" in inspect.signature(nn.Module.load_state_dict).parameters
    torch.manual_seed(0)
    src = TiedLM()
    path = tmp_path / "lm.safetensors"
    ckpt.save({"embed.weight": src.embed.weight, "norm.weight": src.norm.weight,
               "norm.bias": src.norm.bias}, path)
    for given in (path, ckpt.load(path)):
        m = TiedLM(device="meta")  # as under torch.device("meta")
        with pytest.raises(ckpt.InvalidArgumentError) as e:
            ckpt.load_state_dict(m, given)
        assert "meta device" in str(e.value) and "assign=True" in str(e.value), str(e.value)
        assert m.embed.weight.is_meta and m.head.weight is m.embed.weight
        if not has_assign:
            with pytest.raises(ckpt.UnsupportedError):
                ckpt.load_state_dict(m, given, assign=True)
            continue
        rep = ckpt.load_state_dict(m, given, assign=True)
        assert rep.complete and rep.tied == (("head.weight", "embed.weight"),)
        assert not any(p.is_meta for p in m.parameters())
        assert isinstance(m.embed.weight, nn.Parameter) and m.embed.weight.requires_grad
        assert m.head.weight is m.embed.weight  # still one parameter
        assert torch.equal(m.embed.weight, src.embed.weight)
        assert torch.equal(m.norm.bias, src.norm.bias)
    if not has_assign:
        return
    # assign=True on a materialised model replaces its parameters as well
    m = TiedLM()
    rep = ckpt.load_state_dict(m, path, assign=True)
    assert m.head.weight is m.embed.weight and torch.equal(m.head.weight, src.embed.weight)
    # tryout F3: a file that stores the tie under both names (torch.save of
    # a state_dict, ckpt.save, a Store generation): torch's assign puts a
    # parameter of its own under each name (three for two here); ckpt's
    # loads the same values and keeps the model's one parameter
    files = {"torch.save": tmp_path / "both.pt", "ckpt.save": tmp_path / "both.safetensors"}
    torch.save(src.state_dict(), files["torch.save"])
    ckpt.save(src, files["ckpt.save"])
    ckpt.Store(tmp_path / "store").commit({"model": src}, 1)
    files["Store"] = tmp_path / "store" / "ckpt-1.pt"
    oracle = TiedLM(device="meta")
    oracle.load_state_dict(torch.load(files["torch.save"]), assign=True)
    assert oracle.head.weight is not oracle.embed.weight  # torch's own assign unties
    for how, f in files.items():
        for given in (f, ckpt.load(f)):
            m = TiedLM(device="meta")
            rep = ckpt.load_state_dict(m, given, assign=True)
            assert rep.complete, (how, rep)
            assert m.head.weight is m.embed.weight, how
            assert len(list(m.parameters())) == len(list(TiedLM().parameters())) == 3, how
            for k, v in oracle.state_dict().items():
                assert torch.equal(m.state_dict()[k], v), (how, k)
    # a tied key of the checkpoint the model lacks (unexpected, tied) is
    # no name of the model: nothing to tie
    class NoHead(nn.Module):
        def __init__(self, device=None):
            super().__init__()
            self.embed = nn.Embedding(10, 6, device=device)
            self.norm = nn.LayerNorm(6, device=device)
    full = tmp_path / "full.pt"
    torch.save(src.state_dict(), full)  # head.weight beside embed.weight, one storage
    m = NoHead(device="meta")
    rep = ckpt.load_state_dict(m, full, strict=False, assign=True)
    assert rep.unexpected == ("head.weight",) and torch.equal(m.embed.weight, src.embed.weight)


def test_match_report_repr_is_short():
    """tryout: a load_state_dict result in a REPL printed the whole
    MatchReport (every matched pair, thousands of characters). Its repr
    is the verdict, each list's count and first names; str() the summary."""
    m = nn.Sequential(*[nn.Linear(4, 4) for _ in range(300)])
    rep = ckpt.load_state_dict(m, m.state_dict())
    assert repr(rep) == "<ckpt.MatchReport complete: 600 matched (0.bias, 0.weight, 1.bias, ...)>"
    sd = {k: v for k, v in m.state_dict().items() if k != "5.bias"}
    sd["extra"] = torch.ones(1)
    rep = ckpt.load_state_dict(m, sd, strict=False)
    assert repr(rep) == ("<ckpt.MatchReport INCOMPLETE: 599 matched, 1 missing (5.bias), "
                         "1 unexpected (extra)>"), repr(rep)
    assert len(str(rep)) < 300 and "missing: 5.bias" in str(rep)


class WithCls(TiedLM):
    """TiedLM with a new classifier head the checkpoint lacks."""
    def __init__(self):
        super().__init__()
        self.cls = nn.Linear(6, 3)


def test_strict_false_applies_a_rewrite_every_checkpoint_key_matches_through():
    """tryout F9: a DDP checkpoint ("module.") into a model with a new head,
    strict=False, was refused ("nothing would load"), the way out
    (allow_missing) unsaid. strict=False applies the rewrite when every
    checkpoint key matches through it and only model keys stay missing,
    which a PartialRewriteWarning names: torch's load_state_dict(strict=False)
    of the stripped keys is the oracle. strict=True says how to load it."""
    torch.manual_seed(0)
    src = TiedLM()
    sd = {"module." + k: v for k, v in src.state_dict().items()}
    oracle = WithCls()
    want = oracle.load_state_dict({k[len("module."):]: v for k, v in sd.items()}, strict=False)
    m = WithCls()
    with pytest.warns(ckpt.PartialRewriteWarning,
                      match=r"strip 'module.'.*2 model keys left missing: cls.bias, cls.weight"):
        rep = ckpt.load_state_dict(m, sd, strict=False)
    assert sorted(rep.missing_keys) == sorted(want.missing_keys) == ["cls.bias", "cls.weight"]
    assert rep.unexpected_keys == want.unexpected_keys == []
    assert not rep.complete and rep.rewrite == "strip 'module.'"
    for k, v in oracle.state_dict().items():
        if not k.startswith("cls."):
            assert torch.equal(m.state_dict()[k], v), k
    assert m.head.weight is m.embed.weight
    with pytest.raises(ckpt.KeyMismatchError) as e:  # the verdict `ckpt match` gives
        ckpt.load_state_dict(WithCls(), sd)
    assert e.value.report.rewrite_missing == ("cls.bias", "cls.weight")
    assert e.value.report.rewrite is None and len(e.value.report.unexpected) == 4
    assert "rewrite strip 'module.' not applied: every checkpoint key matches through it, " \
        "leaving the model's cls.bias, cls.weight missing; strict=False applies it and loads " \
        "the rest, as does allow_missing=['cls.bias', 'cls.weight']" in str(e.value), str(e.value)
    # what the caller allows is allowed, and then complete, as before
    rep = ckpt.load_state_dict(WithCls(), sd, allow_missing=["cls.*"])
    assert rep.complete and rep.allowed_missing == ("cls.bias", "cls.weight")
    # a checkpoint key that does not match through it: still refused
    sd["module.extra"] = torch.ones(1)
    with pytest.raises(ckpt.KeyMismatchError, match="nothing would load"):
        ckpt.load_state_dict(WithCls(), sd, strict=False)


class CausalBase(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(10, 6)
        self.norm = nn.LayerNorm(6)


class Causal(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = CausalBase()
        self.lm_head = nn.Linear(6, 10, bias=False)


def test_top_level_weight_is_an_unexpected_key_as_torch_says(tmp_path):
    """tryout F2: a flat causal-LM state dict ("model.*" and
    "lm_head.weight") into the base model. torch's strict load refuses,
    lm_head.weight unexpected; the Python audit set the top-level tensor
    aside as training state (complete, unexpected_keys == []) where
    `ckpt match` does not: the loaded object's root entries now reach the
    C audit (ckpt_manifest_add_root_entry), from a path and from an
    object; an rng byte tensor at the top level is still set aside."""
    torch.manual_seed(0)
    sd = Causal().state_dict()
    path = str(tmp_path / "causal.pt")
    torch.save(sd, path)
    with pytest.raises(RuntimeError, match="lm_head.weight"):
        CausalBase().load_state_dict(torch.load(path))
    for src in (path, torch.load(path)):
        m = CausalBase()
        before = snapshot(m)
        with pytest.raises(ckpt.KeyMismatchError) as e:
            ckpt.load_state_dict(m, src)
        rep = e.value.report
        assert not rep.complete and "lm_head.weight" in rep.unexpected_keys, rep
        assert rep.ignored == () and rep.rewrite is None
        assert rep.unapplied_rewrite == "strip 'model.'"
        assert same(before, m.state_dict())
    train = {"model": {k[len("model."):]: v for k, v in sd.items() if k.startswith("model.")},
             "rng": torch.get_rng_state(), "step": 3}
    rep = ckpt.load_state_dict(CausalBase(), train)
    assert rep.complete and rep.ignored == ("rng", "step") and rep.source == "model"


def test_tie_note_names_the_overwritten_values(tmp_path):
    """tryout F7: an untied checkpoint into a tied model loads, and torch's
    copy leaves head.weight's values in the one parameter: the report says
    so (MatchReport.tie_note, `ckpt match`'s note) and so does its text."""
    torch.manual_seed(0)
    src = TiedLM()
    src.head = nn.Linear(6, 10, bias=False)
    path = str(tmp_path / "untied.pt")
    torch.save(src.state_dict(), path)
    oracle = TiedLM()
    oracle.load_state_dict(torch.load(path))
    assert torch.equal(oracle.embed.weight, src.head.weight)  # torch: the last copied wins
    m = TiedLM()
    rep = ckpt.load_state_dict(m, path)
    assert rep.complete and torch.equal(m.embed.weight, src.head.weight)
    assert rep.tie_note == ("embed.weight, head.weight are one parameter of the model; the "
                            "checkpoint holds them as 2 tensors whose values may differ: "
                            "loading copies each into it, the last, head.weight, wins"), rep
    assert "note: " + rep.tie_note in rep.summary()
    assert ckpt.load_state_dict(TiedLM(), TiedLM().state_dict()).tie_note is None
