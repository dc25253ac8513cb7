#!/usr/bin/python3
"""Writes the torch 2.x content cases (issue 14) with whichever torch runs
it, and next to each FILE its FILE.expected.json: torch's own view of the
file in the shape of `ckpt inspect --json --hash sha256` (as
gen_checkpoints.py). Run it with the project virtualenv (torch 2.13) and
with Debian's python3 (torch 1.13): a case the running torch cannot express
(uint16-64, float8, complex32 and DTensor before 2.x) is skipped with one
printed line "SKIP case: reason".

    PYTHON tests/interop/gen_torch2.py OUTDIR

The expected view is computed from torch.load of the file just written
(weights_only=False: these are our own files), with the composite tensors
given as the named parts ckpt documents (FORMATS.md, "torch 2.x content"):
  quantized   NAME.int_repr, NAME.dtype, NAME.qscheme, NAME.scale,
              NAME.zero_point[, NAME.axis]   (Tensor.int_repr(), q_scale()...)
  sparse      NAME.layout, NAME.indices (COO) or NAME.crow_indices and
              NAME.col_indices (CSR), NAME.values, NAME.size.I
  DTensor     NAME.local_tensor, NAME.placements.I ("Shard(dim=0)"),
              NAME.mesh_shape.I, NAME.global_shape.I
  nn.Module   its state_dict() entries, prefixed by its place in the file
  TorchScript torch.jit.load(FILE).state_dict()
"""
import collections
import hashlib
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_checkpoints as g  # noqa: E402  (view, write_expected, dtype names)

# ckpt's dtype names: safetensors' where it has one (F8_E4M3, F8_E5M2,
# F8_E8M0, U16...), documented names otherwise (C32, F8_*FNUZ)
for _name, _ckpt in (("uint16", "U16"), ("uint32", "U32"), ("uint64", "U64"),
                     ("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"),
                     ("float8_e4m3fnuz", "F8_E4M3FNUZ"),
                     ("float8_e5m2fnuz", "F8_E5M2FNUZ"),
                     ("float8_e8m0fnu", "F8_E8M0")):
    if hasattr(torch, _name):
        g.TORCH_DTYPES[getattr(torch, _name)] = _ckpt


def tensor_bytes(t):
    """Logical contents, contiguous row-major little-endian, for any dtype
    (a byte view works where numpy has no such dtype)."""
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


g.torch_tensor_bytes = tensor_bytes

TORCH_MAJOR = int(torch.__version__.split(".")[0])
QSCHEMES = {torch.per_tensor_affine: "per_tensor_affine",
            torch.per_channel_affine: "per_channel_affine",
            torch.per_channel_affine_float_qparams: "per_channel_affine_float_qparams"}


def parts(x):
    """The object ckpt shows for x: composite tensors as their parts."""
    if isinstance(x, torch.Tensor) and type(x).__name__ == "DTensor":
        return {"local_tensor": x.to_local(),
                "placements": tuple(repr(p) for p in x.placements),
                "mesh_shape": tuple(x.device_mesh.shape),
                "global_shape": tuple(x.shape)}
    if isinstance(x, torch.Tensor) and x.is_quantized:
        d = {"int_repr": x.int_repr(), "dtype": str(x.dtype)[6:],
             "qscheme": QSCHEMES[x.qscheme()]}
        if x.qscheme() == torch.per_tensor_affine:
            d.update(scale=x.q_scale(), zero_point=x.q_zero_point())
        else:
            d.update(scale=x.q_per_channel_scales(),
                     zero_point=x.q_per_channel_zero_points(),
                     axis=x.q_per_channel_axis())
        return d
    if isinstance(x, torch.Tensor) and x.layout == torch.sparse_coo:
        d = {"layout": "sparse_coo", "indices": x._indices(),
             "values": x._values(), "size": tuple(x.shape)}
        if TORCH_MAJOR >= 2:  # torch.save writes is_coalesced since 2.x (1.13 does not)
            d["is_coalesced"] = x.is_coalesced()
        return d
    if isinstance(x, torch.Tensor) and x.layout == torch.sparse_csr:
        return {"layout": "sparse_csr", "crow_indices": x.crow_indices(),
                "col_indices": x.col_indices(), "values": x.values(),
                "size": tuple(x.shape)}
    if isinstance(x, nn.Module):
        return x.state_dict()
    if isinstance(x, dict):
        return collections.OrderedDict((k, parts(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)) and not isinstance(x, torch.Size):
        return type(x)(parts(v) for v in x) if type(x) in (list, tuple) else x
    return x


def case(outdir, files, name, make, **save):
    """Saves make() as name; a case this torch cannot express is skipped."""
    path = os.path.join(outdir, name)
    try:
        obj = make()
    except (AttributeError, RuntimeError, TypeError, ImportError, ValueError) as e:
        print("SKIP %s: torch %s cannot express it (%s)" % (name, torch.__version__,
                                                           str(e).splitlines()[0][:100]))
        return
    knobs = save.pop("config", {})  # torch.utils.serialization.config.save
    skip = save.pop("skip_data", False)
    try:
        from torch.utils.serialization import config
        old = {k: getattr(config.save, k) for k in knobs}
        skip_data = torch.serialization.skip_data
    except (ImportError, AttributeError) as e:
        if knobs or skip:
            print("SKIP %s: torch %s cannot express it (%s)" % (name, torch.__version__, e))
            return
    if save.pop("script", False):
        torch.jit.save(obj, path)
        loaded = torch.jit.load(path).state_dict()
    else:
        for k, v in knobs.items():
            setattr(config.save, k, v)
        try:
            if skip:
                with skip_data():
                    torch.save(obj, path, **save)
            else:
                torch.save(obj, path, **save)
        finally:
            for k, v in knobs.items():
                setattr(config.save, k, old[k])
        kw = {"weights_only": False} if "weights_only" in torch.load.__code__.co_varnames else {}
        loaded = torch.load(path, **kw)
    g.write_expected(path, "torch-zip", parts(loaded))
    files.append(path)


# ------------------------------------------------------------------ cases

def new_dtypes():
    f = torch.tensor([0.0, 1.0, -2.0, 0.5, 448.0, -0.0])
    d = {n: f.to(getattr(torch, n)) for n in (
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")}
    d["float8_e8m0fnu"] = torch.tensor([1.0, 2.0, 0.5, 1024.0]).to(torch.float8_e8m0fnu)
    d["uint16"] = torch.tensor([0, 1, 65535, 256], dtype=torch.uint16)
    d["uint32"] = torch.tensor([0, 1, 2**32 - 1], dtype=torch.uint32)
    d["uint64"] = torch.tensor([0, 2**63, 2**64 - 1], dtype=torch.uint64)
    d["complex32"] = torch.tensor([1 + 2j, -0.5j], dtype=torch.complex64).to(torch.complex32)
    d["uint16_view"] = torch.arange(12, dtype=torch.int32).to(torch.uint16).reshape(3, 4).t()
    return d


def params():
    torch.manual_seed(5)
    t = torch.arange(4.0)
    t.note = "attribute"  # a tensor with a __dict__: _rebuild_from_type_v2
    return {"p": nn.Parameter(torch.randn(2, 3)),
            "frozen": nn.Parameter(torch.ones(2), requires_grad=False),
            "with_attr": t}


def quantized():
    x = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.25]])
    return {"per_tensor": torch.quantize_per_tensor(x, 0.25, 3, torch.quint8),
            "per_tensor_q8": torch.quantize_per_tensor(x, 0.5, -1, torch.qint8),
            "per_tensor_q32": torch.quantize_per_tensor(x, 0.125, 0, torch.qint32),
            "per_channel": torch.quantize_per_channel(
                x, torch.tensor([0.1, 0.2], dtype=torch.float64),
                torch.tensor([1, -2]), 0, torch.qint8)}


def sparse():
    dense = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    return {"coo": dense.to_sparse(), "csr": dense.to_sparse_csr(),
            "coo_int": torch.tensor([[0, 7], [0, 0]]).to_sparse(),
            # a repeated index: not coalesced, as torch.load marks it
            "coo_uncoalesced": torch.sparse_coo_tensor([[0, 0, 1], [1, 1, 0]], [1.0, 2.0, 3.0],
                                                       (2, 2))}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.bn = nn.BatchNorm2d(3)
        self.register_buffer("scratch", torch.zeros(2), persistent=False)
        self.register_buffer("steps", torch.tensor(4))
        self.missing = None

    def forward(self, x):
        return self.bn(self.conv(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.layers = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        self.tied = self.layers[0]  # one module under two names

    def forward(self, x):
        return self.layers(x)


def model():
    torch.manual_seed(6)
    return Net()


def dtensor():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    mesh = init_device_mesh("cpu", (2, 2))
    w = torch.arange(24.0).reshape(4, 6)
    return {"w": distribute_tensor(w, mesh, [Shard(0), Replicate()]),
            "b": distribute_tensor(torch.arange(4.0), mesh, [Replicate(), Shard(0)])}


def cuda_saved(outdir, files):
    """A file as torch.save writes it on a GPU: every storage's persistent
    id says 'cuda:0' (rewritten from a CPU save: the data.pkl string
    'cpu' becomes 'cuda:0', byte lengths fixed). Its view is torch's with
    map_location='cpu'."""
    import zipfile
    src = os.path.join(outdir, "cuda_src.tmp")
    path = os.path.join(outdir, "cuda_saved.pt")
    torch.manual_seed(7)
    torch.save({"w": torch.randn(2, 3), "b": torch.arange(3)}, src)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            zout.writestr(zipfile.ZipInfo(info.filename.replace("cuda_src", "cuda_saved"),
                                          (1980, 1, 1, 0, 0, 0)), data)
    os.remove(src)
    kw = {"weights_only": False} if "weights_only" in torch.load.__code__.co_varnames else {}
    g.write_expected(path, "torch-zip", torch.load(path, map_location="cpu", **kw))
    files.append(path)


def generate(outdir):
    os.makedirs(outdir, exist_ok=True)
    files = []
    case(outdir, files, "new_dtypes.pt", new_dtypes)
    case(outdir, files, "new_dtypes_p4.pt", new_dtypes, pickle_protocol=4)
    case(outdir, files, "new_dtypes_p5.pt", new_dtypes, pickle_protocol=5)
    case(outdir, files, "params.pt", params)
    case(outdir, files, "params_p5.pt", params, pickle_protocol=5)
    case(outdir, files, "quantized.pt", quantized)
    case(outdir, files, "sparse.pt", sparse)
    case(outdir, files, "model.pt", model)
    case(outdir, files, "model_yolo.pt", lambda: {"model": model(), "epoch": 7,
                                                  "ema": None})
    case(outdir, files, "model_p4.pt", model, pickle_protocol=4)
    case(outdir, files, "script.pt", lambda: torch.jit.script(model().eval()),
         script=True)
    case(outdir, files, "dtensor.pt", dtensor)
    # torch.save's knobs: no CRC-32 recorded (0 in the directory), data
    # never written (skip_data: zeros, no CRC-32), other alignments
    case(outdir, files, "no_crc32.pt", new_dtypes, config={"compute_crc32": False})
    case(outdir, files, "skip_data.pt", params, skip_data=True)
    case(outdir, files, "align_4096.pt", params, config={"storage_alignment": 4096})
    case(outdir, files, "align_1.pt", new_dtypes, config={"storage_alignment": 1})
    cuda_saved(outdir, files)
    return files


def main():
    if len(sys.argv) != 2:
        print("usage: gen_torch2.py OUTDIR", file=sys.stderr)
        return 2
    files = generate(sys.argv[1])
    print("torch %s wrote %d checkpoints" % (torch.__version__, len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
