#!/usr/bin/python3
"""`ckpt convert IN OUT.dcp` (issue 15, item 1): a torch.save file, a
safetensors file, a sharded set and a DCP directory written as a
torch.distributed.checkpoint directory, against torch 2.13's own DCP:

- the .metadata unpickles (plain pickle.load, as FileSystemReader does) to
  the Metadata torch's own torch_save_to_dcp / dcp.save writes for the same
  state dict: state_dict_metadata (properties, sizes, chunks) and
  planner_data equal and in the same order, storage_data with the same
  keys in the same order and file, version "1.0.0";
- dcp_to_torch_save of the output equals dcp_to_torch_save of torch's
  (what DCP carries: dict keys as str, empty dicts gone), and equals
  torch.load / load_file of the source where those are what DCP carries;
- dcp.load (default FileSystemReader, no process group) fills a state
  dict of the source's shapes with exactly equal values;
- every tensor slice loads alone with torch.load(weights_only=True), its
  storage exactly its bytes (DCP clones views before torch.save);
- ckpt inspect, verify and doctor read the output;
- dtypes bf16, float8, bool, ints, complex; 0-d and empty tensors;
  transposed, strided and offset views; tied tensors and views sharing a
  storage (DCP writes each name's tensor on its own: so does ckpt);
- refusals: a root that is not a dict, a name reached twice, an existing
  target, opaque objects; nothing is left behind.

Needs torch >= 2.4 (Debian's python3 has 1.13): re-runs itself with the
repository's .venv python when there is one. Environment: CKPT_BIN,
CKPT_SRC. Prints "N passed, N failed".
"""
import os
import sys

SRC = os.environ.get("CKPT_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_dcp  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import suite  # noqa: E402

torch_dcp.require(SRC)

import collections  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from torch.distributed.checkpoint.format_utils import (dcp_to_torch_save,  # noqa: E402
                                                       torch_save_to_dcp)

sys.path.insert(0, os.path.join(SRC, "python"))
import ckpt as pyckpt  # noqa: E402

warnings.filterwarnings("ignore")
BIN = os.environ.get("CKPT_BIN", "ckpt")
TMP = tempfile.mkdtemp(prefix="ckpt-convert-dcp-")
TALLY = suite.Tally()


def check(name, cond, detail=""):
    """One assertion: its line, and its count."""
    TALLY.report(cond, name, [str(detail)[:2000]] if detail else ())


def ckpt(*args):
    return subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=600)


def path(name):
    return os.path.join(TMP, name)


# ------------------------------------------------------------ comparing

def same(a, b, where="root"):
    """'' when a and b are equal (tensors: dtype, shape, bits), else where
    they differ."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return "%s: %s vs %s" % (where, type(a).__name__, type(b).__name__)
        if a.dtype != b.dtype or a.shape != b.shape:
            return "%s: %s%s vs %s%s" % (where, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape))
        bits = lambda t: t.detach().contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
        if a.dtype == torch.bool:
            bits = lambda t: t.detach().contiguous().reshape(-1).to(torch.uint8)  # noqa: E731
        return "" if torch.equal(bits(a), bits(b)) else "%s: values differ" % where
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        ok = (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
              and a.shape == b.shape and a.tobytes() == b.tobytes())
        return "" if ok else "%s: numpy differs" % where
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a.keys()) != list(b.keys()):
            return "%s: keys %s vs %s" % (where, list(a.keys())[:8], list(b.keys())[:8])
        for k in a:
            d = same(a[k], b[k], "%s.%s" % (where, k))
            if d:
                return d
        return ""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return "%s: %r vs %r" % (where, type(a), type(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = same(x, y, "%s.%d" % (where, i))
            if d:
                return d
        return ""
    if type(a) is not type(b) or a != b:
        return "%s: %r vs %r" % (where, a, b)
    return ""


def metadata(d):
    with open(os.path.join(d, ".metadata"), "rb") as fh:
        return pickle.load(fh)


def slices_load_alone(d):
    """'' when every tensor chunk's slice loads with weights_only=True as a
    tensor whose storage is exactly its bytes, of the chunk's size."""
    md = metadata(d)
    for idx, info in md.storage_data.items():
        item = md.state_dict_metadata[idx.fqn]
        with open(os.path.join(d, info.relative_path), "rb") as fh:
            fh.seek(info.offset)
            blob = fh.read(info.length)
        obj = torch.load(io.BytesIO(blob), weights_only=hasattr(item, "chunks"))
        if hasattr(item, "chunks"):
            if not isinstance(obj, torch.Tensor) or type(obj) is not torch.Tensor:
                return "%s: slice holds a %s" % (idx.fqn, type(obj).__name__)
            if obj.shape != item.size or obj.dtype != item.properties.dtype:
                return "%s: slice %s%s" % (idx.fqn, obj.dtype, tuple(obj.shape))
            if obj.untyped_storage().nbytes() != obj.nbytes or obj.requires_grad:
                return "%s: storage of %d bytes for %d" % (
                    idx.fqn, obj.untyped_storage().nbytes(), obj.nbytes)
    return ""


def compare_metadata(name, ours, ref):
    """Our .metadata against the one torch wrote for the same state dict."""
    a, b = metadata(ours), metadata(ref)
    check(name + ": state_dict_metadata as torch writes it (same order)",
          list(a.state_dict_metadata.items()) == list(b.state_dict_metadata.items()),
          [(k, v) for k, v in a.state_dict_metadata.items()
           if b.state_dict_metadata.get(k) != v][:3] or
          (list(a.state_dict_metadata), list(b.state_dict_metadata)))
    check(name + ": planner_data as torch writes it",
          list(a.planner_data.items()) == list(b.planner_data.items()),
          (a.planner_data, b.planner_data))
    ka = [(k.fqn, k.offset, k.index, v.relative_path) for k, v in a.storage_data.items()]
    kb = [(k.fqn, k.offset, k.index, v.relative_path) for k, v in b.storage_data.items()]
    check(name + ": storage_data keys and files as torch's, in its order", ka == kb, (ka, kb))
    check(name + ": version and storage_meta", a.version == b.version == "1.0.0" and
          str(a.storage_meta.checkpoint_id) == ours and a.storage_meta.load_id is None and
          len(a.storage_meta.save_id) == 36, (a.version, a.storage_meta))
    check(name + ": one data file, as one rank writes it",
          sorted(os.listdir(ours)) == [".metadata", "__0_0.distcp"], os.listdir(ours))


def loads_back(name, out, like):
    """dcp.load into `like` (the source's shapes) gives `like`'s values."""
    target = torch.utils._pytree.tree_map(
        lambda v: torch.empty_like(v) if isinstance(v, torch.Tensor) else v, like)
    dcp.load(target, checkpoint_id=out)
    d = same(target, like)
    check(name + ": dcp.load fills the state dict exactly", not d, d)


def ckpt_reads(name, out):
    for cmd in ("inspect", "verify", "doctor", "scan"):
        r = ckpt(cmd, out)
        check("%s: ckpt %s reads it" % (name, cmd), r.returncode == 0, r.stdout + r.stderr)
    # Python's ckpt.load (which scans first: a protocol-2 .metadata was
    # once not detected as DCP and refused as an unsafe pickle)
    try:
        got = pyckpt.load(out)
        d = same(got, torch_of_dcp(out))
    except Exception as e:  # noqa: BLE001
        d = repr(e)
    check("%s: ckpt.load gives what dcp_to_torch_save gives" % name, not d, d)


def torch_of_dcp(d):
    p = d.rstrip("/") + ".back.pt"
    dcp_to_torch_save(d, p)
    return torch.load(p, weights_only=False)


def convert(src, out, *extra):
    r = ckpt("convert", src, out, *extra)
    check("convert %s -> %s" % (os.path.basename(src), os.path.basename(out)),
          r.returncode == 0 and os.path.isdir(out), r.stdout + r.stderr)
    return r


# ------------------------------------------------------------ a training .pt

def training_checkpoint():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    big = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    tied = torch.randn(3, 2)
    extra = {
        "bf16": torch.randn(2, 3).to(torch.bfloat16),
        "f8": torch.tensor([0.5, -1.0, 2.0]).to(torch.float8_e4m3fn),
        "f8e5": torch.tensor([0.25, 3.0]).to(torch.float8_e5m2),
        "mask": torch.tensor([True, False, True]),
        "i8": torch.tensor([-3, 4], dtype=torch.int8),
        "u8": torch.tensor([250, 1], dtype=torch.uint8),
        "i32": torch.tensor([[1, -2]], dtype=torch.int32),
        "u16": torch.tensor([65535, 2], dtype=torch.uint16),
        "c64": torch.tensor([1 + 2j], dtype=torch.complex64),
        "f64": torch.tensor([1.5], dtype=torch.float64),
        "scalar": torch.tensor(3.25),
        "empty": torch.empty(0, 5),
        "transposed": big.t(),               # covers its storage: written as is
        "strided": big[:, ::2],              # a view of part: cloned
        "offset": big[2:],                   # likewise
        "tied_a": tied, "tied_b": tied,      # one tensor, two names
        "half_1": big.view(-1)[:12].view(3, 4), "half_2": big.view(-1)[12:],
        "param": torch.nn.Parameter(torch.ones(2)),
    }
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "step": 7,
        "name": "run-1",
        "extra": extra,
        "lr_history": [0.1, 0.01],
        "tensor_list": [torch.zeros(2), torch.ones(1, dtype=torch.int64)],
        "nested_list": [{"w": torch.full((2,), 2.0)}, 5],
        "pair": (1, "a"),
        "tensor_pair": (torch.ones(2), 3),   # a tuple is one item, tensors and all
        "none": None,
        "empty_dict": {},
        "array": np.arange(3, dtype=np.int16),
    }


sd = training_checkpoint()
SRC_PT = path("train.pt")
torch.save(sd, SRC_PT)
OUT = path("train.dcp")
REF = path("train_ref")
convert(SRC_PT, OUT)
torch_save_to_dcp(SRC_PT, REF)
compare_metadata("pt", OUT, REF)
ours, theirs = torch_of_dcp(OUT), torch_of_dcp(REF)
d = same(ours, theirs)
check("pt: dcp_to_torch_save gives what it gives for torch's own save", not d, d)
d = same(ours["model"], dict(sd["model"])) or same(ours["extra"], sd["extra"]) or \
    same(ours["step"], 7) or same(ours["name"], "run-1") or same(ours["pair"], (1, "a"))
check("pt: and equals torch.load of the source where DCP carries it", not d, d)
check("pt: optimizer state keys become str, as in DCP",
      list(ours["optimizer"]["state"]) == [str(k) for k in sd["optimizer"]["state"]] and
      not same(ours["optimizer"]["state"]["0"], sd["optimizer"]["state"][0]),
      list(ours["optimizer"]["state"]))
check("pt: the empty dict vanishes, as in DCP", "empty_dict" not in ours, list(ours))
md = metadata(OUT)
tied = [(k.fqn, v.offset) for k, v in md.storage_data.items() if k.fqn.startswith("extra.tied")]
check("pt: tied tensors are written once per name, as DCP does",
      len(tied) == 2 and tied[0][1] != tied[1][1], tied)
check("pt: requires_grad of a Parameter is in its TensorProperties",
      md.state_dict_metadata["extra.param"].properties.requires_grad is True)
d = slices_load_alone(OUT)
check("pt: every slice loads alone (weights_only), storage = its bytes", not d, d)
like = torch.load(SRC_PT, weights_only=False)
like["optimizer"]["state"] = {str(k): v for k, v in like["optimizer"]["state"].items()}
del like["empty_dict"]
loads_back("pt", OUT, like)
ckpt_reads("pt", OUT)
# the library reads it back as dcp_to_torch_save assembles it
r = ckpt("inspect", "--json", OUT)
try:
    names = {t["name"] for t in json.loads(r.stdout)["tensors"]}
except Exception as e:  # noqa: BLE001
    names = str(e)
check("pt: ckpt sees every tensor under its DCP name",
      isinstance(names, set) and {"extra.bf16", "model.0.weight", "optimizer.state.0.exp_avg",
                                  "nested_list.0.w", "tensor_list.1"} <= names, names)

# ------------------------------------------------------------ safetensors

st = {"model.embed.weight": torch.randn(4, 3).to(torch.bfloat16),
      "model.norm.weight": torch.ones(3),
      "mask": torch.tensor([True, False]),
      "f8": torch.tensor([1.0, -2.0]).to(torch.float8_e4m3fn),
      "ids": torch.tensor([[1, 2]], dtype=torch.int64),
      "scalar": torch.tensor(2.0),
      "empty": torch.zeros(0)}
SRC_ST = path("m.safetensors")
save_file(st, SRC_ST)
OUT_ST = path("m.dcp")
convert(SRC_ST, OUT_ST)
ref_st = path("m_ref")
dcp.save(load_file(SRC_ST), checkpoint_id=ref_st)
compare_metadata("safetensors", OUT_ST, ref_st)
d = same(torch_of_dcp(OUT_ST), load_file(SRC_ST))
check("safetensors: dcp_to_torch_save equals load_file of the source", not d, d)
loads_back("safetensors", OUT_ST, load_file(SRC_ST))
d = slices_load_alone(OUT_ST)
check("safetensors: every slice loads alone", not d, d)
ckpt_reads("safetensors", OUT_ST)

# ------------------------------------------------------------ a sharded set

SET = path("set")
os.mkdir(SET)
shard_1 = {"a.weight": torch.randn(3, 2), "a.bias": torch.zeros(3, dtype=torch.float16)}
shard_2 = {"b.weight": torch.arange(4, dtype=torch.int32)}
save_file(shard_1, os.path.join(SET, "model-00001-of-00002.safetensors"))
save_file(shard_2, os.path.join(SET, "model-00002-of-00002.safetensors"))
index = {"metadata": {"total_size": 26},
         "weight_map": {**{k: "model-00001-of-00002.safetensors" for k in shard_1},
                        **{k: "model-00002-of-00002.safetensors" for k in shard_2}}}
with open(os.path.join(SET, "model.safetensors.index.json"), "w") as fh:
    json.dump(index, fh)
OUT_SET = path("set.dcp")
convert(os.path.join(SET, "model.safetensors.index.json"), OUT_SET)
merged = {**shard_1, **shard_2}
back = torch_of_dcp(OUT_SET)
d = same(dict(sorted(back.items())), dict(sorted(merged.items())))
check("sharded: dcp_to_torch_save equals the shards' tensors", not d, d)
loads_back("sharded", OUT_SET, merged)
ckpt_reads("sharded", OUT_SET)

# ------------------------------------------------------------ a DCP directory

SRC_DCP = path("src_dcp")
dcp_sd = {"model": {"w": torch.randn(3, 4), "b": torch.zeros(4, dtype=torch.bfloat16)},
          "step": 11, "hist": [torch.ones(2), "x"]}
dcp.save(dcp_sd, checkpoint_id=SRC_DCP)
OUT_DCP = path("again.dcp")
convert(SRC_DCP, OUT_DCP)
compare_metadata("dcp", OUT_DCP, SRC_DCP)
d = same(torch_of_dcp(OUT_DCP), torch_of_dcp(SRC_DCP))
check("dcp: dcp_to_torch_save equals the source's", not d, d)
loads_back("dcp", OUT_DCP, dcp_sd)
ckpt_reads("dcp", OUT_DCP)
# 2 gloo ranks, Shard(0)/Shard(1)/Replicate DTensors, both slice formats
# (dcp_gen.py; FileSystemReader reads only the torch_save one, the oracle
# of both: the same state dict)
RANKS = path("ranks")
r = subprocess.run([sys.executable, os.path.join(SRC, "tests", "dcp", "dcp_gen.py"), "sharded-both",
                    RANKS], timeout=600, capture_output=True)
if r.returncode:
    sys.exit("dcp_gen.py sharded-both: exit %d\n%s" % (r.returncode,
             r.stderr.decode(errors="replace")[-6000:]))
oracle = torch_of_dcp(os.path.join(RANKS, "torch_save"))
for fmt in ("torch_save", "safetensors"):
    out_ranks = path("ranks_%s.dcp/" % fmt)  # a trailing slash names the directory too
    convert(os.path.join(RANKS, fmt), out_ranks)
    d = same(torch_of_dcp(out_ranks), oracle)
    check("dcp from 2 ranks (%s): dcp_to_torch_save equals the source's" % fmt, not d, d)
    ckpt_reads("dcp from 2 ranks (%s)" % fmt, out_ranks)
# Python's ckpt.convert: the same library call
OUT_PY = path("py.dcp")
rep_py = pyckpt.convert(SRC_DCP, OUT_PY)
check("ckpt.convert writes DCP", rep_py.format == "dcp" and rep_py.keys == 5 and
      rep_py.tensors == 3 and rep_py.shards == 0, rep_py)
d = same(torch_of_dcp(OUT_PY), torch_of_dcp(SRC_DCP))
check("ckpt.convert: the same checkpoint", not d, d)
try:
    pyckpt.convert(SRC_DCP, OUT_PY)
    raised = None
except pyckpt.InvalidArgumentError as e:
    raised = str(e)
check("ckpt.convert: an existing target raises InvalidArgumentError",
      raised is not None and "exists" in raised, raised)
# --format dcp names a directory whatever it is called
OUT_FMT = path("plain_dir")
convert(SRC_DCP, OUT_FMT, "--format", "dcp")
d = same(torch_of_dcp(OUT_FMT), torch_of_dcp(SRC_DCP))
check("--format dcp: the same checkpoint", not d, d)
# an empty directory is a target too
EMPTY = path("empty_target")
os.mkdir(EMPTY)
convert(SRC_ST, EMPTY, "--format", "dcp")

# ------------------------------------------------------------ refusals

before = sorted(os.listdir(TMP))
bare = path("bare.pt")
torch.save(torch.ones(2), bare)
r = ckpt("convert", bare, path("bare.dcp"))
check("a bare tensor is refused (DCP saves a state dict)",
      r.returncode == 1 and "state dict" in r.stderr, r.stdout + r.stderr)
dup = path("dup.pt")
torch.save({"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}}, dup)
r = ckpt("convert", dup, path("dup.dcp"))
check("a name reached twice is refused, as dcp.save refuses it",
      r.returncode == 2 and "a.b" in r.stderr, r.stdout + r.stderr)
try:
    dcp.save(torch.load(dup), checkpoint_id=path("dup_ref"))
    torch_refuses = False
except BaseException as e:  # noqa: BLE001 (CheckpointException is no Exception)
    torch_refuses = "duplicated flatten key" in str(e)
shutil.rmtree(path("dup_ref"), ignore_errors=True)
check("(torch refuses it too)", torch_refuses)
r = ckpt("convert", SRC_ST, OUT)
check("an existing directory is not replaced",
      r.returncode == 2 and "exists" in r.stderr and not same(torch_of_dcp(OUT), ours),
      r.stdout + r.stderr)
opaque = path("opaque.pt")
torch.save({"t": torch.ones(1), "obj": collections.deque([1])}, opaque)
r = ckpt("convert", opaque, path("opaque.dcp"))
check("an opaque object is refused, named",
      r.returncode == 1 and "obj" in r.stderr and "deque" in r.stderr, r.stdout + r.stderr)
floats = path("floats.pt")
torch.save({"t": {1.5: torch.ones(1)}}, floats)
r = ckpt("convert", floats, path("floats.dcp"))
check("a float dict key is refused (ckpt does not redo Python's str of it)",
      r.returncode == 1 and "dict key of kind float" in r.stderr, r.stdout + r.stderr)
r = ckpt("convert", SRC_ST, path("meta.dcp"), "--meta", "k=v")
check("metadata has no place in DCP: refused", r.returncode == 2, r.stdout + r.stderr)
after = sorted(set(os.listdir(TMP)) - {"bare.pt", "dup.pt", "opaque.pt", "floats.pt"})
check("refusals leave nothing behind", after == before, sorted(set(after) ^ set(before)))

shutil.rmtree(TMP)
sys.exit(TALLY.end())
