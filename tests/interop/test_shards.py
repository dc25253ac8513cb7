#!/usr/bin/python3
"""`ckpt convert --max-shard-size` (issue 14 item 5): sharded sets as
Hugging Face writes them, read back by ckpt and by the peers.

A state dict (tied embedding and head, a tensor larger than the shard
size, small ones) saved by torch 2.13 is converted to a safetensors set
and to a .bin set for several sizes; then
  - the index's weight_map and total_size, and the shard file names, equal
    huggingface_hub's split_torch_state_dict_into_shards for the same
    state dict and size (parse_size_to_int reading the same text), of the
    state dict save_torch_state_dict splits for safetensors (its
    _clean_state_dict_for_safetensors drops the tied lm_head.weight): a
    tied name the shard holds only in ckpt.aliases is not in weight_map,
    since transformers counts every listed name as loaded and would leave
    it unfilled, silent for a tensor shared without a tie;
  - ckpt.load of the index (and of the directory) equals torch.load of the
    input, and `ckpt verify` says OK;
  - the transformers habit: every shard of weight_map loaded with
    safetensors.torch.load_file gives exactly the names weight_map puts
    there, and the names left out are the shards' ckpt.aliases (what the
    model's tie_weights restores), which point at their target; .bin
    shards loaded with torch.load(weights_only=True) in torch 2.13
    (mmap=True too) and torch 1.13 give the input's tensors;
  - a set that fits one shard is one file without an index; a training
    checkpoint with non-tensor values is refused unless --select picks the
    state dict; a bad size is a usage error.
Without .venv (torch 2.13, safetensors, huggingface_hub) the test says
SKIP. Environment: CKPT_BIN, CKPT_SRC, CKPT_LIB. Ends with "N passed,
N failed".
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", os.path.join(SRC, "build", "ckpt"))
LIB = os.environ.get("CKPT_LIB", os.path.join(SRC, "build", "libckpt.so"))
VENV = os.path.join(SRC, ".venv", "bin", "python")
DEBIAN = "/usr/bin/python3"
SIZES = ["3KB", "3000", "1KiB", "100MB"]

MAKE = r"""
import sys, torch, collections
torch.manual_seed(0)
sd = collections.OrderedDict()
sd["emb.weight"] = torch.randn(100, 16)
sd["l1.weight"] = torch.randn(16, 16)
sd["l1.bias"] = torch.randn(16)
sd["big"] = torch.randn(1000, dtype=torch.float64)
sd["l2.weight"] = torch.randn(16, 16).to(torch.bfloat16)
sd["steps"] = torch.arange(5)
sd["lm_head.weight"] = sd["emb.weight"]
torch.save(sd, sys.argv[1])
torch.save({"model": sd, "step": 3}, sys.argv[2])
"""

# run in the venv: every check that needs torch 2.13 and the peers;
# prints one JSON object of findings
CHECK = r"""
import json, os, sys, torch
sys.path.insert(0, sys.argv[4])
import ckpt
from huggingface_hub import split_torch_state_dict_into_shards
from huggingface_hub.serialization._base import parse_size_to_int
from huggingface_hub.serialization._torch import _clean_state_dict_for_safetensors
from safetensors import safe_open
from safetensors.torch import load_file
src, d, size = sys.argv[1], sys.argv[2], sys.argv[3]
want = torch.load(src, weights_only=True)
out = []
def same(got, what):
    if sorted(got) != sorted(want):
        out.append("%s: keys %s" % (what, sorted(set(got) ^ set(want))))
        return
    for k in want:
        if got[k].dtype != want[k].dtype or not torch.equal(got[k], want[k]):
            out.append("%s: %s differs" % (what, k))
# huggingface_hub reads decimal units (its own parser) and bytes; binary
# units are ckpt's addition
limit = int(size) if size.isdigit() else \
    int(size[:-3]) * 1024 ** ("KMGT".index(size[-3].upper()) + 1) if size.endswith("iB") \
    else parse_size_to_int(size)
for kind, pattern in (("safetensors", "model{suffix}.safetensors"),
                      ("bin", "pytorch_model{suffix}.bin")):
    sd = dict(want)
    if kind == "safetensors":
        sd = _clean_state_dict_for_safetensors(sd, {}, force_contiguous=False)
    hf = split_torch_state_dict_into_shards(
        sd, filename_pattern=pattern,
        max_shard_size=limit)
    base = "model.safetensors" if kind == "safetensors" else "pytorch_model.bin"
    index = os.path.join(d, base + ".index.json")
    if not hf.is_sharded:
        if os.path.exists(index):
            out.append("%s: an index for one shard" % kind)
        # OUT itself, as named (pytorch_model.pt)
        single = "model.safetensors" if kind == "safetensors" else "pytorch_model.pt"
        same(ckpt.load(os.path.join(d, single)), kind + " single file")
        continue
    doc = json.load(open(index))
    wm = {k: v for k, v in hf.tensor_to_filename.items()}
    if doc["weight_map"] != wm:
        out.append("%s: weight_map %s, huggingface_hub %s" % (kind, doc["weight_map"], wm))
    if doc["metadata"].get("total_size") != hf.metadata["total_size"]:
        out.append("%s: total_size %s, huggingface_hub %s" % (
            kind, doc["metadata"].get("total_size"), hf.metadata["total_size"]))
    if sorted(set(doc["weight_map"].values())) != sorted(hf.filename_to_tensors):
        out.append("%s: shard names differ" % kind)
    same(ckpt.load(index), kind + " ckpt.load(index)")
    # transformers' loop: each shard of weight_map loaded, its keys
    # collected; what weight_map lists and no shard gave is never filled
    got, aliases = {}, {}
    for shard in sorted(set(doc["weight_map"].values())):
        path = os.path.join(d, shard)
        if kind == "safetensors":
            part = load_file(path)
            with safe_open(path, "pt") as f:
                aliases.update(json.loads((f.metadata() or {}).get("ckpt.aliases", "{}")))
        else:
            part = torch.load(path, weights_only=True, mmap=True)
        listed = {k for k, v in doc["weight_map"].items() if v == shard}
        if set(part) != listed:
            out.append("%s: %s holds %s, weight_map lists %s" % (kind, shard, sorted(part),
                                                                 sorted(listed)))
        got.update(part)
    if set(want) - set(got) != set(aliases):
        out.append("%s: not loaded %s, aliases %s" % (kind, sorted(set(want) - set(got)),
                                                       sorted(aliases)))
    for alias, target in aliases.items():
        got[alias] = got[target]  # the model's tie_weights
    same(got, kind + " shards loaded one by one")
print(json.dumps(out))
"""

OLD = r"""
import json, os, sys, torch
d, src = sys.argv[1], sys.argv[2]
want = torch.load(src)
doc = json.load(open(os.path.join(d, "pytorch_model.bin.index.json")))
got = {}
for shard in sorted(set(doc["weight_map"].values())):
    got.update(torch.load(os.path.join(d, shard), weights_only=True))
print(json.dumps(sorted(k for k in want if k not in got or not torch.equal(got[k], want[k]))
                 + sorted(set(got) - set(want))))
"""


def run(args, **kw):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, **kw)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def env():
    return dict(os.environ, CKPT_LIB=LIB)


def have_venv():
    if os.path.exists(VENV):
        return True
    print("SKIP: no %s (torch 2.13, safetensors, huggingface_hub)" % VENV)
    return False


def make(tmp):
    sd, train = os.path.join(tmp, "sd.pt"), os.path.join(tmp, "train.pt")
    rc, out, err = run([VENV, "-c", MAKE, sd, train])
    assert rc == 0, err
    return sd, train


def test_sharded_sets_as_huggingface_writes_them():
    if not have_venv():
        return
    with tempfile.TemporaryDirectory() as tmp:
        sd, _ = make(tmp)
        for size in SIZES:
            d = os.path.join(tmp, "set_" + size)
            os.mkdir(d)
            for out in ("model.safetensors", "pytorch_model.pt"):
                rc, o, err = run([CKPT, "convert", sd, os.path.join(d, out),
                                  "--max-shard-size", size])
                assert rc == 0, err
            rc, o, err = run([VENV, "-c", CHECK, sd, d, size, os.path.join(SRC, "python")],
                             env=env())
            assert rc == 0, err
            assert json.loads(o) == [], (size, o)
            index = os.path.join(d, "model.safetensors.index.json")
            if os.path.exists(index):
                for path in (index, os.path.join(d, "pytorch_model.bin.index.json")):
                    rc, o, err = run([CKPT, "verify", path])
                    assert rc == 0 and o.startswith("OK"), (rc, o, err)
            # torch 1.13 reads the .bin shards too
            if os.path.exists(os.path.join(d, "pytorch_model.bin.index.json")):
                rc, o, err = run([DEBIAN, "-c", OLD, d, sd])
                assert rc == 0 and json.loads(o) == [], (o, err)


def test_shard_output_names_and_refusals():
    if not have_venv():
        return
    with tempfile.TemporaryDirectory() as tmp:
        sd, train = make(tmp)
        # a directory gets transformers' default names
        d = os.path.join(tmp, "dir")
        os.mkdir(d)
        rc, o, err = run([CKPT, "convert", sd, d, "--max-shard-size", "3KB"])
        assert rc == 0 and o.startswith("wrote 3 shards"), (o, err)
        assert sorted(os.listdir(d)) == ["model-0000%d-of-00003.safetensors" % i
                                         for i in (1, 2, 3)] + ["model.safetensors.index.json"]
        rc, o, err = run([CKPT, "convert", sd, d, "--max-shard-size", "3KB", "--format",
                          "torch", "-q"])
        assert rc == 0 and o == "", (o, err)
        assert "pytorch_model.bin.index.json" in os.listdir(d)
        # a training checkpoint: tensors only, or --select the state dict
        rc, o, err = run([CKPT, "convert", train, os.path.join(tmp, "t.safetensors"),
                          "--max-shard-size", "3KB"])
        assert rc == 1 and '"step" is a int' in err and "--select" in err, (rc, err)
        assert not os.path.exists(os.path.join(tmp, "t.safetensors.index.json"))
        rc, o, err = run([CKPT, "convert", train, os.path.join(tmp, "t.safetensors"),
                          "--max-shard-size", "3KB", "--select", "model"])
        assert rc == 0, err
        doc = json.load(open(os.path.join(tmp, "t.safetensors.index.json")))
        assert sorted(doc["weight_map"])[0] == "big", doc  # the state dict's own keys
        for bad in ("0", "-5", "5XB", "GB", ""):
            rc, o, err = run([CKPT, "convert", sd, os.path.join(tmp, "x.safetensors"),
                              "--max-shard-size", bad])
            assert rc == 2 and "--max-shard-size" in err, (bad, rc, err)



def test_reshard_writes_its_own_total_size():
    """A set resharded (--exclude, another size) gets the index a direct
    conversion of its source writes: total_size is the new set's, an
    integer, not the input index's "total_size" carried over as a string
    (the input index's metadata is the set's metadata). A set converted to
    one file does not carry the input index's total_size either."""
    if not have_venv():
        return
    with tempfile.TemporaryDirectory() as tmp:
        sd, _ = make(tmp)
        for sub in ("a", "d_safetensors", "r_safetensors", "d_torch", "r_torch"):
            os.mkdir(os.path.join(tmp, sub))
        first = os.path.join(tmp, "a", "model.safetensors")
        rc, o, err = run([CKPT, "convert", sd, first, "--max-shard-size", "3KB"])
        assert rc == 0, err
        index = first + ".index.json"
        for kind, out in (("safetensors", "model.safetensors"), ("torch", "pytorch_model.bin")):
            direct, again = os.path.join(tmp, "d_" + kind, out), os.path.join(tmp, "r_" + kind, out)
            for src, dst in ((sd, direct), (index, again)):
                rc, o, err = run([CKPT, "convert", src, dst, "--max-shard-size", "2KB",
                                  "--exclude", "big"])
                assert rc == 0, (src, err)
            want = json.load(open(direct + ".index.json"))["metadata"]
            got = json.load(open(again + ".index.json"))["metadata"]
            assert isinstance(want["total_size"], int) and got == want, (kind, got, want)
        one = os.path.join(tmp, "one.safetensors")
        rc, o, err = run([CKPT, "convert", index, one, "--exclude", "big"])
        assert rc == 0, err
        rc, o, err = run([CKPT, "inspect", "--json", one])
        assert rc == 0 and "total_size" not in json.loads(o)["metadata"], o


if __name__ == "__main__":
    sys.exit(suite.run_cases(globals(), os.path.abspath(__file__)))
