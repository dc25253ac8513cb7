"""Key-audit tests: `ckpt match`, `ckpt diff` and `ckpt rename` on real
PyTorch pairs (gen_pairs.py, written into a temporary directory) and on the
corpus's key-remap files. Every report is asserted exactly.

Environment (set by ctest): CKPT_BIN, CKPT_CORPUS. Needs Debian's python3
with python3-torch (the oracle for diff values). Prints one line per case
and ends with "N passed, N failed"; exits 1 on failure.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from suite import selected  # noqa: E402
import suite  # noqa: E402

BIN = os.environ.get("CKPT_BIN", "ckpt")
CORPUS = os.environ.get("CKPT_CORPUS", "/work/shared/corpus")
BURN = os.path.join(CORPUS, "torch/burn")
HERE = os.path.dirname(os.path.abspath(__file__))
TMP = tempfile.mkdtemp(prefix="ckpt-keys-test-")

MODEL_KEYS = sorted([
    "fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "bn.running_mean",
    "bn.running_var", "bn.num_batches_tracked", "fc2.weight", "fc2.bias",
    "fc3.weight", "fc3.bias"])

CASES = []


def case(name, reads_corpus=False):
    """Registers a test case of this run's suite (tests/suite.py); main()
    runs them once the files exist."""
    def wrap(fn):
        if selected(reads_corpus=reads_corpus):
            CASES.append((name, fn))
        return fn
    return wrap


def run(*args):
    p = subprocess.run([BIN] + list(args), capture_output=True, timeout=120, cwd=TMP)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def run_json(*args):
    rc, out, err = run(*args)
    assert out.endswith("}\n"), "expected one JSON object: %r %r" % (out, err)
    return rc, json.loads(out)


def path(name):
    return os.path.join(TMP, name)


def eq(got, want):
    assert got == want, "\n got: %r\nwant: %r" % (got, want)


# ------------------------------------------------------------------ match

def report(ckpt, spec, **fields):
    """The full expected `ckpt match --json` object: an empty report with
    `fields` set."""
    r = {"checkpoint": ckpt, "expect": spec, "complete": False, "matched": 0,
         "missing_keys": [], "unexpected_keys": [], "shape_mismatch": [],
         "dtype_mismatch": [], "allowed": {"missing": [], "unexpected": []},
         "defaulted": [], "tied": [], "rewrite": None, "candidates": [],
         "ignored_top_level": [],
         "warning": None, "rewrite_note": None, "tie_note": None}
    for k, v in fields.items():
        assert k in r, k
        r[k] = v
    return r


def check_match(ckpt, spec, opts, want_rc, **fields):
    rc, got = run_json("match", ckpt, "--expect", spec, "--json", *opts)
    eq(got, report(ckpt, spec, **fields))
    eq(rc, want_rc)


def rewrite(desc, matches, applied):
    return {"description": desc, "matches": matches, "applied": applied}


def cand(desc, matches):
    return {"description": desc, "matches": matches}


def complete(n):
    return {"complete": True, "matched": n}


@case("match: the same model")
def _():
    check_match(path("model.pt"), path("model.pt"), [], 0, **complete(11))


@case("match: DataParallel keys, no --normalize: named, not applied")
def _():
    check_match(path("dp.pt"), path("model.pt"), [], 1,
                missing_keys=MODEL_KEYS,
                unexpected_keys=["module." + k for k in MODEL_KEYS],
                rewrite=rewrite("strip 'module.'", 11, False),
                candidates=[cand("strip 'module.'", 11)],
                warning="nothing would load: 0 of 11 expected keys match")


for name, desc in [("dp.pt", "strip 'module.'"), ("orig.pt", "strip '_orig_mod.'"),
                   ("dp_orig.pt", "strip 'module._orig_mod.'"),
                   ("orig_dp.pt", "strip '_orig_mod.module.'"),
                   ("nested_state_dict.pt", "strip 'state_dict.'"),
                   ("nested_model.pt", "strip 'model.'")]:
    @case("match --normalize: %s -> %s" % (name, desc))
    def _(name=name, desc=desc):
        check_match(path(name), path("model.pt"), ["--normalize"], 0,
                    rewrite=rewrite(desc, 11, True), candidates=[cand(desc, 11)],
                    **complete(11))


@case("match --normalize: a plain checkpoint into a DataParallel model")
def _():
    check_match(path("model.pt"), path("dp.pt"), ["--normalize"], 0,
                rewrite=rewrite("add 'module.'", 11, True),
                candidates=[cand("add 'module.'", 11)], **complete(11))


@case("match --normalize: one key without the prefix keeps its name: complete")
def _():
    # torch's consume_prefix_in_state_dict_if_present strips the keys that
    # have the prefix and leaves fc1.bias as it is: a strict load succeeds
    check_match(path("partial.pt"), path("model.pt"), ["--normalize"], 0,
                complete=True, matched=11,
                rewrite=rewrite("strip 'module.'", 11, True),
                candidates=[cand("strip 'module.'", 11)])


@case("match: a layer renamed, one resized, one retyped")
def _():
    check_match(path("changed.pt"), path("model.pt"), ["--normalize"], 1,
                matched=5, missing_keys=["fc2.bias", "fc2.weight"],
                unexpected_keys=["fc_two.bias", "fc_two.weight"],
                shape_mismatch=[
                    {"name": "fc3.bias", "checkpoint": [3], "expected": [2]},
                    {"name": "fc3.weight", "checkpoint": [3, 8], "expected": [2, 8]}],
                dtype_mismatch=[
                    {"name": "fc1.bias", "checkpoint": "F16", "expected": "F32"},
                    {"name": "fc1.weight", "checkpoint": "F16", "expected": "F32"}],
                # the renamed layer is named (the other keys keep their
                # names), not applied: fc3's shapes differ
                rewrite=rewrite("replace 'fc_two.' with 'fc2.'", 11, False),
                candidates=[cand("replace 'fc_two.' with 'fc2.'", 11)],
                # 5 match and the 2 retyped ones load with a cast (torch's
                # load_state_dict copies them): 7 of 11, no warning
                warning=None)


@case("match: fc1.weight.bad_key is unexpected, not part of fc1.weight")
def _():
    check_match(path("bad_key.pt"), path("model.pt"), ["--normalize"], 1,
                matched=10, missing_keys=["fc1.weight"],
                unexpected_keys=["fc1.weight.bad_key"])


@case("match: allowed exceptions are listed, not dropped")
def _():
    check_match(path("bad_key.pt"), path("model.pt"),
                ["--allow-missing", "fc1.*", "--allow-unexpected=*.bad_key"], 0,
                allowed={"missing": ["fc1.weight"], "unexpected": ["fc1.weight.bad_key"]},
                **complete(10))


@case("match: spec from `ckpt inspect --json` (a manifest)")
def _():
    rc, out, _ = run("inspect", "--json", path("model.pt"))
    eq(rc, 0)
    with open(path("spec.json"), "w") as fh:
        fh.write(out)
    check_match(path("dp.pt"), path("spec.json"), ["--normalize"], 0,
                rewrite=rewrite("strip 'module.'", 11, True),
                candidates=[cand("strip 'module.'", 11)], **complete(11))


@case("match: tied weights: the spec stores lm_head.weight in embed.weight")
def _():
    # filled through embed.weight: satisfied, listed as tied, not missing
    check_match(path("tied_dropped.pt"), path("tied.pt"), [], 0,
                tied=[{"name": "lm_head.weight", "tied_to": "embed.weight"}], **complete(3))
    check_match(path("tied_dropped.pt"), path("tied.pt"),
                ["--allow-missing", "lm_head.weight"], 0,
                tied=[{"name": "lm_head.weight", "tied_to": "embed.weight"}],
                **complete(3))


@case("match: tied weights: safetensors save_model alias in __metadata__")
def _():
    check_match(path("tied_hf.safetensors"), path("tied.pt"), [], 0,
                tied=[{"name": "lm_head.weight", "tied_to": "embed.weight"}], **complete(3))


@case("match: an alias in __metadata__ against a model with a head of its own")
def _():
    # the model does not tie lm_head to embed: a loader that ignores the
    # checkpoint's declaration leaves lm_head at its init, so it is missing
    # (ckpt.load_state_dict agrees: test_parity), and the tie is named
    tie = [{"name": "lm_head.weight", "tied_to": "embed.weight"}]
    check_match(path("tied_hf.safetensors"), path("tied_other_head.pt"), [], 1,
                complete=False, matched=3, missing_keys=["lm_head.weight"], tied=tie)
    check_match(path("tied_hf.safetensors"), path("tied_other_head.pt"),
                ["--allow-missing", "lm_head.weight"], 0, complete=True, matched=3,
                allowed={"missing": ["lm_head.weight"], "unexpected": []}, tied=tie)
    rc, out, _ = run("match", path("tied_hf.safetensors"), "--expect", path("tied_other_head.pt"))
    eq(rc, 1)
    assert out.startswith("MISMATCH: 3 of 4 expected keys match (1 missing, "), out
    assert "missing keys (1):\n  lm_head.weight (the checkpoint declares it equal to " \
        "embed.weight; the model does not tie them: a loader that ignores the declaration " \
        "leaves it at its init)\n" in out, out


@case("match: tied weights: an unexpected key sharing a matched tensor")
def _():
    rc, out, _ = run("inspect", "--json", path("tied_dropped.pt"))
    with open(path("spec_dropped.json"), "w") as fh:
        fh.write(out)
    check_match(path("tied.pt"), path("spec_dropped.json"), [], 1,
                matched=3, unexpected_keys=["lm_head.weight"],
                tied=[{"name": "lm_head.weight", "tied_to": "embed.weight"}])


@case("match: corpus key_remap.pt against missing_module_field.pt", reads_corpus=True)
def _():
    a, b = os.path.join(BURN, "key_remap.pt"), os.path.join(BURN, "missing_module_field.pt")
    check_match(a, b, ["--normalize"], 1,
                missing_keys=["conv1.bias", "conv1.weight"],
                unexpected_keys=["conv.conv1.bias", "conv.conv1.weight", "conv.conv2.weight"],
                rewrite=rewrite("strip 'conv.'", 2, False),
                candidates=[cand("strip 'conv.'", 2)],
                warning="nothing would load: 0 of 2 expected keys match")
    check_match(a, b, ["--normalize", "--allow-unexpected", "conv.conv2.*"], 0,
                allowed={"missing": [], "unexpected": ["conv.conv2.weight"]},
                rewrite=rewrite("strip 'conv.'", 2, True),
                candidates=[cand("strip 'conv.'", 2)], **complete(2))
    # the other way: conv.conv2.weight stays missing
    check_match(b, a, ["--normalize"], 1,
                missing_keys=["conv.conv1.bias", "conv.conv1.weight", "conv.conv2.weight"],
                unexpected_keys=["conv1.bias", "conv1.weight"],
                rewrite=rewrite("add 'conv.'", 2, False),
                candidates=[cand("add 'conv.'", 2)],
                warning="nothing would load: 0 of 3 expected keys match",
                # what the rewrite leaves: torch's strict=False load of the
                # renamed keys misses conv.conv2.weight alone
                rewrite_note="it pairs every checkpoint key; 1 model key would stay "
                             "missing: conv.conv2.weight (with them allowed missing, or "
                             "with strict=False, every checkpoint key loads)")


@case("match: corpus top_level_key.pt (state dict under a key)", reads_corpus=True)
def _():
    check_match(os.path.join(BURN, "top_level_key.pt"),
                os.path.join(BURN, "missing_module_field.pt"), ["--normalize"], 0,
                rewrite=rewrite("strip 'my_state_dict.'", 2, True),
                candidates=[cand("strip 'my_state_dict.'", 2)], **complete(2))


@case("match: corpus enum_depthwise_false.pt against _true.pt: nothing loads", reads_corpus=True)
def _():
    check_match(os.path.join(BURN, "enum_depthwise_false.pt"),
                os.path.join(BURN, "enum_depthwise_true.pt"), ["--normalize"], 1,
                missing_keys=["conv.dconv.bias", "conv.dconv.weight", "conv.pconv.bias",
                              "conv.pconv.weight"],
                unexpected_keys=["conv.bias", "conv.weight"],
                warning="nothing would load: 0 of 4 expected keys match")


def torch_load(p):
    import torch
    return torch.load(p)


def flatten(obj, prefix=(), tensors=None, leaves=None):
    """(tensors, leaves) of a torch.load result by flattened name, as ckpt
    names them: dict keys as text, sequence indices in decimal."""
    import torch
    tensors = {} if tensors is None else tensors
    leaves = {} if leaves is None else leaves
    if isinstance(obj, dict):
        items = ((str(k), v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(obj))
    else:
        (tensors if isinstance(obj, torch.Tensor) else leaves)[".".join(prefix)] = obj
        return tensors, leaves
    for k, v in items:
        flatten(v, prefix + (k,), tensors, leaves)
    return tensors, leaves


def typed(v):
    """A leaf as `ckpt diff --json` writes it."""
    for t, kind in ((type(None), "none"), (bool, "bool"), (int, "int"), (float, "float"),
                    (str, "str")):
        if isinstance(v, t):
            return {"type": kind, "value": v}
    raise AssertionError("unexpected leaf %r" % (v,))


def values_expected(a_path, b_path):
    """The "values" part of `ckpt diff --json`, from torch.load: exact
    kinds and values, NaN equal to NaN."""
    a, b = flatten(torch_load(a_path))[1], flatten(torch_load(b_path))[1]
    by = lambda names: sorted(names, key=lambda n: n.encode())
    same = lambda x, y: type(x) is type(y) and (x == y or (x != x and y != y))
    common = by(set(a) & set(b))
    return {"only_in_a": by(set(a) - set(b)), "only_in_b": by(set(b) - set(a)),
            "differing": [{"name": n, "a": typed(a[n]), "b": typed(b[n])}
                          for n in common if not same(a[n], b[n])],
            "equal": sum(1 for n in common if same(a[n], b[n]))}


TRAIN_DESC = "strip 'model.' (other top-level entries ignored: epoch, optimizer)"


@case("match: a training checkpoint against its model: the model entry, others ignored")
def _():
    tensors = sorted(flatten(torch_load(path("train.pt")))[0], key=lambda n: n.encode())
    eq(len(tensors), 11 + 3 * 8)  # the model, Adam's step and moments per parameter
    check_match(path("train.pt"), path("train_model.pt"), [], 1,
                missing_keys=MODEL_KEYS, unexpected_keys=tensors,
                rewrite=rewrite(TRAIN_DESC, 11, False), candidates=[cand(TRAIN_DESC, 11)],
                ignored_top_level=["epoch", "optimizer"],
                warning="nothing would load: 0 of 11 expected keys match")
    check_match(path("train.pt"), path("train_model.pt"), ["--normalize"], 0,
                rewrite=rewrite(TRAIN_DESC, 11, True), candidates=[cand(TRAIN_DESC, 11)],
                ignored_top_level=["epoch", "optimizer"], **complete(11))
    rc, out, _ = run("match", path("train.pt"), "--expect", path("train_model.pt"),
                     "--normalize")
    eq(rc, 0)
    lines = out.splitlines()
    eq(lines[0], "COMPLETE: 11 of 11 expected keys match after " + TRAIN_DESC)
    eq(lines[-2:], ["rewrite: %s (11 keys), applied" % TRAIN_DESC,
                    "ignored top-level entries (2): epoch, optimizer"])
    rc, out, _ = run("match", path("train.pt"), "--expect", path("train_model.pt"))
    assert "rewrite: %s (11 keys), not applied: use --normalize" % TRAIN_DESC in out, out
    assert "ckpt rename" not in out, out  # rename keeps the other entries


@case("match: a wrapper's rewrite not applied names the rename that writes it")
def _():
    # was "or ckpt rename --auto", which is "--auto needs a value"
    rc, out, _ = run("match", path("dp.pt"), "--expect", path("model.pt"))
    eq(rc, 1)
    assert "rewrite: strip 'module.' (11 keys), not applied: use --normalize, or write a " \
        "renamed copy: ckpt rename CKPT OUT --auto SPEC\n" in out, out
    out_path = os.path.join(TMP, "dp_renamed.pt")
    eq(run("rename", path("dp.pt"), out_path, "--auto", path("model.pt"))[0], 0)
    eq(run("match", out_path, "--expect", path("model.pt"))[0], 0)


@case("match: text report")
def _():
    rc, out, _ = run("match", path("tied_dropped.pt"), "--expect", path("tied.pt"))
    eq(rc, 0)
    lines = out.splitlines()
    eq(lines[0], "COMPLETE: 3 of 4 expected keys match, 1 tied to a matched key")
    eq(lines[3:], ["tied keys (1):", "  lm_head.weight (tied to embed.weight)"])
    # nothing matches (every key differs in dtype): the tie is to a key
    # that loads cast, not to a matched one ("0 of 4 match, 1 tied to a
    # matched key" read as a contradiction)
    rc, out, _ = run("match", path("tied_dropped_bf16.pt"), "--expect", path("tied.pt"))
    eq(rc, 1)
    # dtypes alone differ: said so (it read "0 of 4 expected keys match",
    # as if nothing loaded), and that torch casts them
    eq(out.splitlines()[0], "MISMATCH: names and shapes match; only dtypes differ: 0 of 4 "
                            "expected keys have the model's dtype, 3 another (torch's "
                            "load_state_dict casts them as it copies), 1 tied to a key that "
                            "loads with a dtype cast")
    rc, out, _ = run("match", path("tied.pt"), "--expect", path("tied_dropped.pt"))
    eq(rc, 1)
    lines = out.splitlines()
    eq(lines[0], "MISMATCH: 3 of 3 expected keys match (0 missing, 1 unexpected, "
                 "0 shape, 0 dtype mismatches)")
    assert "  lm_head.weight (tied to embed.weight)" in lines, out
    rc, out, _ = run("match", path("dp.pt"), "--expect", path("model.pt"), "--normalize")
    eq(rc, 0)
    eq(out.splitlines()[0], "COMPLETE: 11 of 11 expected keys match after strip 'module.'")
    eq(out.splitlines()[-1], "rewrite: strip 'module.' (11 keys), applied")
    # floating-point dtypes alone differ: what torch does with them, and
    # how ckpt.load_state_dict casts; not said when a shape differs too
    rc, out, _ = run("match", path("model_bf16.pt"), "--expect", path("model.pt"))
    eq(rc, 1)
    assert "note: only floating-point dtypes differ: torch's load_state_dict casts them " \
        "to the model's F32 as it copies; ckpt.load_state_dict does with " \
        "dtype=\"model\"\n" in out, out
    # a mixed-precision model (bfloat16 Linears, float32 norm): a float32
    # checkpoint differs in the Linears' dtype alone; dtype=torch.bfloat16
    # would cast the norm too, so the note says dtype="model" (it said
    # dtype=torch.bfloat16, which ckpt.load_state_dict then refuses)
    rc, spec = run_json("inspect", "--json", path("model.pt"))
    for t in spec["tensors"]:
        if t["name"].startswith("fc1."):
            t["dtype"] = "BF16"
            t["nbytes"] //= 2
    with open(path("mixed.json"), "w") as f:
        json.dump(spec, f)
    rc, out, _ = run("match", path("model.pt"), "--expect", path("mixed.json"))
    eq(rc, 1)
    assert "note: only floating-point dtypes differ: torch's load_state_dict casts them " \
        "to the model's BF16 as it copies; ckpt.load_state_dict does with " \
        "dtype=\"model\"\n" in out and "torch.bfloat16" not in out, out
    # parameters of two dtypes: each into its own
    for t in spec["tensors"]:
        if t["name"].startswith("fc2."):
            t["dtype"] = "F16"
            t["nbytes"] //= 2
    with open(path("mixed2.json"), "w") as f:
        json.dump(spec, f)
    rc, out, _ = run("match", path("model.pt"), "--expect", path("mixed2.json"))
    eq(rc, 1)
    assert "note: only floating-point dtypes differ: torch's load_state_dict casts each " \
        "into its parameter's dtype as it copies; ckpt.load_state_dict does with " \
        "dtype=\"model\"\n" in out, out
    rc, out, _ = run("match", path("changed.pt"), "--expect", path("model.pt"))
    eq(rc, 1)
    assert "dtype mismatch (2):" in out and "note:" not in out, out


@case("match: usage and I/O errors exit 2")
def _():
    eq(run("match", path("model.pt"))[0], 2)
    eq(run("match", path("model.pt"), "--expect")[0], 2)
    eq(run("match", path("model.pt"), "--expect", path("nope.pt"))[0], 2)
    eq(run("match", path("model.pt"), "--expect", path("model.pt"), "--bogus")[0], 2)
    rc, out, _ = run("match", "--help")
    eq(rc, 0)
    assert out.startswith("usage: ckpt match"), out


@case("match: a JSON spec that is not a manifest")
def _():
    with open(path("bad.json"), "w") as fh:
        fh.write('{"tensors": [{"name": "a", "dtype": "F32", "shape": [-1]}]}')
    rc, out, err = run("match", path("model.pt"), "--expect", path("bad.json"))
    eq(rc, 1)
    assert "tensors[0]: expected each dimension to be a non-negative integer" in err, err


# ------------------------------------------------------------------ diff

def diff_a_b_expected(a, b):
    return {
        "a": a, "b": b, "identical": False, "keys_only": False,
        "only_in_a": ["only_a"], "only_in_b": ["only_b"], "tied": [], "shape_mismatch": [],
        "dtype_mismatch": [], "equal": 1,
        "tensors": [
            {"name": "ints", "bitwise_equal": False, "compared": True, "numel": 3,
             "differing": 1, "max_abs_diff": 1.0, "max_rel_diff": 0.25,
             "nan": {"a": 0, "b": 0}, "inf": {"a": 0, "b": 0},
             "nonfinite_mismatch": 0, "positions": []},
            # 0.0 and -0.0 are equal values; NaN equals NaN
            {"name": "nan", "bitwise_equal": False, "compared": True, "numel": 5,
             "differing": 2, "max_abs_diff": "inf", "max_rel_diff": "inf",
             "nan": {"a": 1, "b": 2}, "inf": {"a": 1, "b": 0},
             "nonfinite_mismatch": 2, "positions": [2, 4]},
            {"name": "scalar", "bitwise_equal": False, "compared": True, "numel": 1,
             "differing": 1, "max_abs_diff": 1.0, "max_rel_diff": 0.5,
             "nan": {"a": 0, "b": 0}, "inf": {"a": 0, "b": 0},
             "nonfinite_mismatch": 0, "positions": []},
            {"name": "w", "bitwise_equal": False, "compared": True, "numel": 12,
             "differing": 3, "max_abs_diff": 22.0, "max_rel_diff": 2.0,
             "nan": {"a": 0, "b": 0}, "inf": {"a": 0, "b": 0},
             "nonfinite_mismatch": 0, "positions": []},
        ],
        "values": {"only_in_a": [], "only_in_b": [], "differing": [], "equal": 0},
        "rewrite": None}


@case("diff: a key one side lacks because its writer dropped a tied copy")
def _():
    # lm_head.weight is embed.weight's tensor in tied.pt; tied_dropped.pt
    # and tied_hf.safetensors (save_model's alias in __metadata__) lack it
    tied = [{"name": "lm_head.weight", "tied_to": "embed.weight"}]
    for a, b, side in ((path("tied.pt"), path("tied_dropped.pt"), "a"),
                       (path("tied_dropped.pt"), path("tied.pt"), "b"),
                       (path("tied.pt"), path("tied_hf.safetensors"), "a"),
                       (path("tied_hf.safetensors"), path("tied_dropped.pt"), None)):
        rc, got = run_json("diff", a, b, "--json", "--keys-only")
        eq((rc, got["only_in_" + side] if side else [], got["tied"]),
           (1, ["lm_head.weight"], tied) if side else (0, [], []))
    rc, out, _ = run("diff", path("tied_dropped.pt"), path("tied.pt"), "--keys-only")
    want = ("  lm_head.weight (tied to embed.weight, which both have: A saved the tied "
            "weight once)")
    assert want in out.splitlines(), out
    # an untied key on one side gets no such note
    rc, got = run_json("diff", path("diff_a.pt"), path("diff_b.pt"), "--json", "--keys-only")
    eq((got["only_in_a"], got["tied"]), (["only_a"], []))
    # the other side's alias names the key, but this side's tensor is not
    # its partner's values: no tied copy once values are read (names alone,
    # --keys-only, cannot tell)
    other = path("tied_other_head.pt")
    for args, ties in ((["--json"], []), (["--json", "--keys-only"], tied)):
        rc, got = run_json("diff", path("tied_hf.safetensors"), other, *args)
        eq((rc, got["only_in_b"], got["tied"]), (1, ["lm_head.weight"], ties))
    rc, got = run_json("diff", path("tied_hf.safetensors"), path("tied.pt"), "--json")
    eq((got["only_in_b"], got["tied"]), (["lm_head.weight"], tied))


@case("diff: values, NaN/Inf positions, keys on one side")
def _():
    a, b = path("diff_a.pt"), path("diff_b.pt")
    rc, got = run_json("diff", a, b, "--json")
    eq(got, diff_a_b_expected(a, b))
    eq(rc, 1)
    rc, out, _ = run("diff", a, b)
    lines = out.splitlines()
    eq(lines[0], "DIFFERENT: 1 only in A, 1 only in B, 0 shape, 0 dtype "
                 "differences; 1 key bitwise equal, 4 with different values")
    # the verb agrees with the count of differing elements
    for want in ["  ints: 1 of 3 elements differs, max abs diff 1, max rel diff 0.25",
                 "  scalar: 1 of 1 element differs, max abs diff 1, max rel diff 0.5",
                 "  w: 3 of 12 elements differ, max abs diff 22, max rel diff 2"]:
        assert want in lines, (want, out)


@case("diff: training checkpoints differing in epoch and lr only (torch oracle)")
def _():
    a, b = path("train.pt"), path("train_e7.pt")
    want = values_expected(a, b)
    eq([d["name"] for d in want["differing"]], ["epoch", "optimizer.param_groups.0.lr"])
    rc, got = run_json("diff", a, b, "--json")
    eq(rc, 1)
    eq(got["identical"], False)
    eq((got["only_in_a"], got["only_in_b"], got["tensors"]), ([], [], []))
    eq(got["equal"], 35)
    eq(got["values"], want)
    rc, out, _ = run("diff", a, b)
    eq(rc, 1)
    lines = out.splitlines()
    eq(lines[0], "DIFFERENT: 0 only in A, 0 only in B, 0 shape, 0 dtype differences; "
                 "35 keys bitwise equal, 0 with different values; values: 0 only in A, "
                 "0 only in B, 2 differ, %d equal" % want["equal"])
    eq(lines[3:], ["values that differ (2):", "  epoch: A 2, B 7",
                   "  optimizer.param_groups.0.lr: A 0.001, B 0.5"])
    # within a tolerance the learning rates still differ; the same file twice
    rc, got = run_json("diff", a, b, "--json", "--rtol", "0.1")
    eq([d["name"] for d in got["values"]["differing"]], ["epoch", "optimizer.param_groups.0.lr"])
    rc, got = run_json("diff", a, a, "--json")
    eq((rc, got["identical"], got["values"]["equal"]), (0, True, want["equal"] + 2))


@case("diff: a .pt against its safetensors conversion compares the recorded tree")
def _():
    for name in ("train", "train_e7"):
        rc, _, err = run("convert", path(name + ".pt"), path(name + ".safetensors"))
        eq((rc, err), (0, ""))
    rc, got = run_json("diff", path("train.pt"), path("train.safetensors"), "--json")
    eq((rc, got["identical"], got["equal"]), (0, True, 35))
    eq(got["values"]["equal"], values_expected(path("train.pt"), path("train.pt"))["equal"])
    rc, got = run_json("diff", path("train.pt"), path("train_e7.safetensors"), "--json")
    eq(rc, 1)
    eq(got["values"], values_expected(path("train.pt"), path("train_e7.pt")))
    rc, got = run_json("diff", path("train_e7.safetensors"), path("train.safetensors"), "--json")
    eq(got["values"], values_expected(path("train_e7.pt"), path("train.pt")))


@case("diff: DataParallel keys: the rewrite is named, --normalize compares through it")
def _():
    a, b = path("model.pt"), path("dp.pt")
    note = "B's keys are A's with 'module.' added"
    rc, out, _ = run("diff", a, b)
    eq(rc, 1)
    eq(out.splitlines()[3], "keys: %s; compare with --normalize" % note)
    rc, got = run_json("diff", a, b, "--json")
    eq(got["rewrite"], {"description": "strip 'module.'", "matches": 11, "applied": False,
                        "note": note})
    eq(len(got["only_in_b"]), 11)
    rc, got = run_json("diff", a, b, "--json", "--normalize")
    eq((rc, got["identical"], got["equal"], got["only_in_a"], got["only_in_b"]),
       (0, True, 11, [], []))
    eq(got["rewrite"]["applied"], True)
    rc, out, _ = run("diff", a, b, "--normalize")
    eq(out.splitlines()[3], "keys: B's keys renamed before comparing (strip 'module.', "
                            "11 keys): " + note)
    rc, got = run_json("diff", path("spec.json"), b, "--keys-only", "--normalize", "--json")
    eq((rc, got["identical"]), (0, True))


@case("diff --normalize: a model against a training checkpoint holding it")
def _():
    a, b = path("train_model.pt"), path("train.pt")
    # the entries the rewrite ignores are neither listed nor counted (they
    # were listed as only in B, and the diff exited 1): the model entry
    # equals the model
    rc, got = run_json("diff", a, b, "--json", "--normalize")
    eq(rc, 0)
    eq(got["rewrite"], {"description": TRAIN_DESC, "matches": 11, "applied": True,
                        "note": "B's keys under 'model.' are A's; B's other top-level "
                                "entries: epoch, optimizer (left out: not compared)"})
    eq((got["equal"], got["only_in_a"], got["only_in_b"], got["tensors"]), (11, [], [], []))
    eq(got["values"], {"only_in_a": [], "only_in_b": [], "differing": [], "equal": 0})
    eq(got["identical"], True)
    rc, got = run_json("diff", b, a, "--json", "--normalize")
    eq(rc, 0)
    eq(got["rewrite"]["note"], "A's keys under 'model.' are B's; A's other top-level "
                               "entries: epoch, optimizer (left out: not compared)")
    eq((got["equal"], got["only_in_b"], got["only_in_a"]), (11, [], []))
    # without --normalize nothing is left out
    rc, got = run_json("diff", a, b, "--json")
    eq(rc, 1)
    eq(got["only_in_b"], sorted(k for k in flatten(torch_load(b))[0] if k not in
                                flatten(torch_load(a))[0]))


@case("diff: a key only in one file that is its own tensor is not called tied")
def _():
    rc, out, _ = run("diff", path("model.pt"), path("tied.pt"))
    eq(rc, 1)
    assert "(tied to" not in out, out


@case("diff: identical files exit 0")
def _():
    rc, got = run_json("diff", path("model.pt"), path("model.pt"), "--json")
    eq(rc, 0)
    eq(got["identical"], True)
    eq(got["equal"], 11)
    eq(got["tensors"], [])


def torch_diff(a_path, b_path):
    """Expected per-tensor diffs computed by torch in float64."""
    import torch
    a, b = torch.load(a_path), torch.load(b_path)
    out = []
    for name in sorted(a):
        x, y = a[name], b[name]
        if x.dtype == y.dtype and torch.equal(x, y):
            continue
        xd, yd = x.double().flatten(), y.double().flatten()
        d = (xd - yd).abs()
        rel = [0.0 if di == 0 else (math.inf if yi == 0 else di / abs(yi))
               for di, yi in zip(d.tolist(), yd.tolist())]
        out.append({"name": name, "bitwise_equal": False, "compared": True,
                    "numel": x.numel(), "differing": int((d != 0).sum()),
                    "max_abs_diff": float(d.max()), "max_rel_diff": max(rel),
                    "nan": {"a": 0, "b": 0}, "inf": {"a": 0, "b": 0},
                    "nonfinite_mismatch": 0, "positions": []})
    return out


@case("diff: F32 against BF16, values widened and compared (torch oracle)")
def _():
    a, b = path("model.pt"), path("model_bf16.pt")
    rc, got = run_json("diff", a, b, "--json")
    eq(rc, 1)
    eq(got["dtype_mismatch"], [{"name": k, "a": "F32", "b": "BF16"}
                               for k in MODEL_KEYS if k != "bn.num_batches_tracked"])
    eq(got["equal"], 1)
    eq(got["tensors"], torch_diff(a, b))
    # within a tolerance the values agree, the dtypes still differ
    rc, got = run_json("diff", a, b, "--json", "--atol", "1e-3")
    eq(rc, 1)
    eq([t["differing"] for t in got["tensors"]], [0] * 10)
    rc, got = run_json("diff", a, b, "--json", "--rtol=0.004")
    eq([t["differing"] for t in got["tensors"]], [0] * 10)
    # the text's counts add up to the common keys: those within tolerance
    # are counted (they were in none of the counts)
    rc, out, _ = run("diff", a, b, "--atol", "1e-3")
    assert "; 1 key bitwise equal, 10 within tolerance, 0 with different values" in \
        out.splitlines()[0], out


@case("diff --keys-only on manifests")
def _():
    rc, got = run_json("diff", path("spec.json"), path("spec.json"), "--keys-only", "--json")
    eq(rc, 0)
    eq(got, {"a": path("spec.json"), "b": path("spec.json"), "identical": True,
             "keys_only": True, "only_in_a": [], "only_in_b": [], "tied": [],
             "shape_mismatch": [], "dtype_mismatch": [], "equal": None, "tensors": None, "values": None,
             "rewrite": None})
    rc, got = run_json("diff", path("model.pt"), path("changed.pt"), "--keys-only", "--json")
    eq(rc, 1)
    eq(got["only_in_a"], ["fc2.bias", "fc2.weight"])
    eq(got["only_in_b"], ["fc_two.bias", "fc_two.weight"])
    eq(got["shape_mismatch"], [{"name": "fc3.bias", "a": [2], "b": [3]},
                               {"name": "fc3.weight", "a": [2, 8], "b": [3, 8]}])
    eq(got["dtype_mismatch"], [{"name": "fc1.bias", "a": "F32", "b": "F16"},
                               {"name": "fc1.weight", "a": "F32", "b": "F16"}])


@case("diff: usage errors exit 2")
def _():
    eq(run("diff", path("spec.json"), path("model.pt"))[0], 2)  # values need files
    eq(run("diff", path("model.pt"))[0], 2)
    eq(run("diff", path("model.pt"), path("model.pt"), "--atol", "-1")[0], 2)
    eq(run("diff", path("model.pt"), path("model.pt"), "--rtol", "x")[0], 2)
    eq(run("diff", path("model.pt"), path("nope.pt"))[0], 2)


# ------------------------------------------------------------------ rename

def same_tensors(got, want):
    """Same keys in the same order, bitwise equal tensors."""
    import torch
    eq(list(got), list(want))
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k


@case("rename: DataParallel keys stripped; torch loads the original state dict")
def _():
    rc, out, err = run("rename", path("dp.pt"), path("r_dp.pt"), "--strip-prefix", "module")
    eq((rc, out, err), (0, "renamed 11 of 11 keys: %s\n" % path("r_dp.pt"), ""))
    same_tensors(torch_load(path("r_dp.pt")), torch_load(path("model.pt")))
    eq(run("diff", path("r_dp.pt"), path("model.pt"))[0], 0)


@case("rename: stacked wrappers, --replace then --strip-prefix, in order")
def _():
    rc, _, err = run("rename", path("orig_dp.pt"), path("r_od.pt"),
                     "--replace", "_orig_mod.=", "--strip-prefix=module.")
    eq(rc, 0)
    same_tensors(torch_load(path("r_od.pt")), torch_load(path("model.pt")))


@case("keys (names) and tensors (storages) counted alike by every command on a tied set")
def _():
    src = path("tied.pt")  # 4 keys; embed.weight and lm_head.weight one storage
    rc, out, _ = run("inspect", src)
    assert "4 keys, " in out and "; shared: 3 storages, " in out, out
    rc, out, _ = run("verify", src)
    assert out.startswith("OK %s (torch-zip, 4 keys, " % src), out
    st, pt = path("count.safetensors"), path("count.pt")
    rc, out, _ = run("convert", src, st)
    eq(out, "wrote %s (safetensors, 4 keys, 3 tensors, %d bytes)\n" % (st, os.path.getsize(st)))
    rc, out, _ = run("convert", src, pt)
    eq(out, "wrote %s (torch-zip, 4 keys, 3 storages, %d bytes)\n" % (pt, os.path.getsize(pt)))
    rc, out, _ = run("rename", src, path("count_r.pt"), "--add-prefix", "m.")
    eq(out, "renamed 4 of 4 keys: %s\n" % path("count_r.pt"))
    rc, out, _ = run("diff", src, pt)
    assert "; 4 keys bitwise equal, " in out.splitlines()[0], out
    rc, out, _ = run("doctor", src)
    assert out.startswith("HEALTHY: torch-zip, 4 keys, "), out
    for f in (src, st):  # the converted file keeps lm_head.weight as an alias
        rc, doc = run_json("doctor", "--json", f)
        eq([n for n in doc["sections"]["not_vouched_for"] if n.startswith("tensors sharing")],
           ["tensors sharing one storage (tied or views): embed.weight, lm_head.weight"])


@case("rename --dry-run prints the mapping and writes nothing")
def _():
    rc, out, _ = run("rename", path("partial.pt"), "--dry-run", "--strip-prefix", "module.")
    eq(rc, 0)
    lines = out.splitlines()
    eq(lines[0], "module.bn.bias -> bn.bias")  # natural key order
    eq(len(lines), 11)
    eq(lines[-1], "10 of 11 keys renamed (dry run: nothing written)")
    rc, out, _ = run("rename", path("partial.pt"), path("never.pt"), "--dry-run",
                     "--strip-prefix", "module.")
    eq(rc, 0)
    assert not os.path.exists(path("never.pt"))


@case("rename --auto SPEC: nested state dict unwrapped, other values kept")
def _():
    rc, _, _ = run("rename", path("nested_state_dict.pt"), path("r_ns.pt"), "--auto",
                   path("model.pt"))
    eq(rc, 0)
    got, sd = torch_load(path("r_ns.pt")), torch_load(path("model.pt"))
    eq(got.pop("epoch"), 3)
    same_tensors(got, sd)
    # a JSON manifest as SPEC, safetensors in and out
    rc, _, _ = run("rename", path("tied_hf.safetensors"), path("r_tied.safetensors"),
                   "--add-prefix", "model")
    eq(rc, 0)
    rc, got = run_json("inspect", "--json", path("r_tied.safetensors"))
    eq([t["name"] for t in got["tensors"]], ["model.embed.weight", "model.norm.bias",
                                              "model.norm.weight"])
    eq(got["metadata"]["lm_head.weight"], "embed.weight")  # metadata kept as is


@case("rename refusals: no key matched, collisions, no complete --auto, lists")
def _():
    rc, _, err = run("rename", path("model.pt"), path("x.pt"), "--strip-prefix", "nothere")
    eq(rc, 2)
    assert "--strip-prefix 'nothere' matches no key" in err, err
    rc, _, err = run("rename", path("model.pt"), path("x.pt"), "--replace", "fc1=fc2")
    eq(rc, 1)
    assert "'fc1.weight' and 'fc2.weight' would both be named 'fc2.weight'" in err, err
    rc, _, err = run("rename", path("changed.pt"), path("x.pt"), "--auto", path("model.pt"))
    eq(rc, 1)
    assert "--auto: the best rewrite, replace 'fc_two.' with 'fc2.'" in err, err
    assert "no complete match" in err, err
    # why: the shapes and dtypes that differ under the rewrite, named (it
    # said only "matches 11 of 11 keys: no complete match"), also for keys
    # the rewrite renames (net.fc3.* paired as fc3.*)
    eq(run("rename", path("changed.pt"), path("net_changed.pt"), "--add-prefix", "net.")[0], 0)
    eq(run("rename", path("model.pt"), path("model_two.pt"), "--replace", "fc2=fc_two")[0], 0)
    for ck, spec, desc in (("changed.pt", "model.pt", "replace 'fc_two.' with 'fc2.'"),
                           ("net_changed.pt", "model_two.pt", "strip 'net.'")):
        rc, _, err = run("rename", path(ck), path("x.pt"), "--auto", path(spec))
        eq(rc, 1)
        assert ("--auto: the best rewrite, %s, matches 11 of 11 keys of %s; 2 differ in "
                "shape: fc3.bias (checkpoint [3], expected [2]), fc3.weight (checkpoint "
                "[3, 8], expected [2, 8]); 2 differ in dtype: fc1.bias (checkpoint F16, "
                "expected F32), fc1.weight (checkpoint F16, expected F32): no complete match"
                % (desc, path(spec))) in err, err
    rc, _, err = run("rename", path("model.pt"), path("x.pt"), "--auto", path("model.pt"))
    eq(rc, 2)
    assert "the keys already match" in err, err
    rc, _, err = run("rename", path("train.pt"), path("x.pt"), "--auto", path("train_model.pt"))
    eq(rc, 1)
    assert "ckpt convert --select ENTRY writes that entry alone, with its own keys" in err, err
    rc, _, err = run("rename", path("list.pt"), path("x.pt"), "--replace", "layers=blocks")
    eq(rc, 1)
    assert "would move a tensor out of a list" in err, err
    assert not os.path.exists(path("x.pt"))
    eq(run("rename", path("model.pt"), path("x.pt"))[0], 2)           # no rule
    eq(run("rename", path("model.pt"), "--strip-prefix", "a")[0], 2)  # no OUT
    eq(run("rename", path("model.pt"), path("x.pt"), "--replace", "=x")[0], 2)


def main():
    g = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "gen_pairs.py"), TMP],
                       cwd=TMP, capture_output=True, timeout=300)
    if g.returncode != 0:
        print(g.stdout.decode(), g.stderr.decode())
        print("0 passed, 1 failed")
        return 1
    tally = suite.Tally()
    for name, fn in CASES:
        try:
            fn()
        except Exception:
            tally.report(False, name, [traceback.format_exc().rstrip()])
        else:
            tally.report(True, name)
    shutil.rmtree(TMP, ignore_errors=True)
    return tally.end()


if __name__ == "__main__":
    sys.exit(main())
