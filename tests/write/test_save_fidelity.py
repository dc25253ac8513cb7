#!/usr/bin/python3
"""ckpt.save keeps what torch.save keeps: a table of values saved with
torch.save and with ckpt.save (.pt and .safetensors), loaded back with
torch.load (weights_only True and False) and ckpt.load, must give the same
types, values, attributes (a state dict's OrderedDict and _metadata, a
Parameter's requires_grad, a Counter) and storage sharing; what torch.save
would write as a class torch.load(weights_only=True) does not build
(defaultdict, namedtuple, a tensor subclass, attributes) ckpt.save refuses
by name.

Run by ctest with Debian's python3 (torch 1.13) and again with the
project's .venv (torch 2.x). Environment: CKPT_LIB, CKPT_SRC (for the
package on sys.path). Prints one line per check and "N passed, N failed".
"""
import collections
import enum
import os
import sys
import tempfile
import traceback
import warnings

SRC = os.environ.get("CKPT_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import ckpt  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import suite  # noqa: E402

warnings.simplefilter("ignore")  # audit findings, torch's TypedStorage notes
TALLY = suite.Tally()
TMP = tempfile.mkdtemp()


def check(name, fn):
    try:
        fn()
    except Exception:
        TALLY.report(False, name, [traceback.format_exc().rstrip()])
    else:
        TALLY.report(True, name)


def storage_ptr(t):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr()


def describe(obj, offsets=True):
    """A comparable picture of obj: classes, values, attributes, which
    tensors share a storage (by order of first appearance), each tensor's
    strides and, unless offsets is False, its storage offset (a safetensors
    file holds no bytes no tensor reads: a view alone is saved compact)."""
    storages = {}

    def d(o):
        if isinstance(o, torch.Tensor):
            p = storage_ptr(o)
            return (type(o).__name__, str(o.dtype), tuple(o.shape), o.detach().tolist(),
                    o.requires_grad, storages.setdefault(p, len(storages)) if p else None,
                    o.stride(), o.storage_offset() if offsets else None)
        if isinstance(o, (np.ndarray, np.generic)):
            return (type(o).__name__, o.dtype.str, o.shape, o.tolist())
        if isinstance(o, dict):
            return (type(o).__name__, [(d(k), d(v)) for k, v in o.items()],
                    sorted((k, d(v)) for k, v in vars(o).items()) if hasattr(o, "__dict__") else None)
        if isinstance(o, (list, tuple, set, frozenset)):
            items = sorted(o, key=repr) if isinstance(o, (set, frozenset)) else o
            return (type(o).__name__, [d(v) for v in items])
        return (type(o).__name__, o)
    return d(obj)


def torch_load(path, weights_only):
    try:
        return ("loaded", describe(torch.load(path, weights_only=weights_only)))
    except Exception as e:  # the refusal itself must match
        return ("refused", type(e).__name__)


def table():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2),
                              torch.nn.Sequential(torch.nn.Conv1d(2, 2, 1)))
    tied = torch.nn.Module()
    tied.a = torch.nn.Linear(2, 2, bias=False)
    tied.b = torch.nn.Linear(2, 2, bias=False)
    tied.b.weight = tied.a.weight
    frozen = torch.nn.Parameter(torch.arange(4.0), requires_grad=False)
    trained = torch.nn.Parameter(torch.ones(2, 2))
    hooked = torch.nn.Parameter(torch.ones(2))
    hooked.register_hook(lambda g: g)  # torch.save drops backward hooks
    attrs = collections.OrderedDict([("k", 1)])
    attrs.note = {"epoch": 2}  # OrderedDict.__reduce__ pickles its attributes
    t = torch.arange(6).reshape(2, 3)
    x = torch.arange(12.0).reshape(3, 4)
    arr = np.arange(4, dtype=np.float32)
    sd = net.state_dict()
    return {
        "state_dict": sd,
        "nested": {"model": sd, "tied": tied.state_dict(), "epoch": 3},
        "keep_vars": net.state_dict(keep_vars=True),
        "parameters": {"frozen": frozen, "trained": trained, "again": trained},
        "parameter_root": trained,
        "parameter_hooked": {"h": hooked},
        "ordered_attributes": {"o": attrs},
        "requires_grad": {"g": torch.ones(3, requires_grad=True), "n": torch.zeros(1)},
        "ordered_plain": collections.OrderedDict([("b", t), ("a", 1)]),
        "ordered_nested": collections.OrderedDict(
            [("x", collections.OrderedDict([("y", [1, (2.0, "z")])]))]),
        "shared": {"a": t, "b": t, "list": [t, {"c": t}]},
        "counter": {"c": collections.Counter(a=1, b=2)},
        # a Parameter and the state dict's plain tensor of it: one storage
        "parameter_and_state_dict": {"p": net[0].weight, "sd": net.state_dict()},
        # views beside their base: one storage, each its own view (ckpt
        # gave each a storage of its own); a slice alone: its whole storage
        "views": {"x": x, "row": x[1], "t": x.t(), "col": x[:, 2], "tail": x.view(-1)[5:]},
        "view_alone": {"row": x[1]},
        "view_param": {"w": net[0].weight, "w0": net[0].weight[0]},
        # numpy values: torch.save pickles numpy's own classes (weights_only
        # refuses them); ckpt converted them to tensors and Python numbers
        "numpy": {"a": arr, "again": arr, "zero_d": np.array(2.5), "i8": np.arange(3, dtype=np.int8),
                  "f32": np.float32(1.5), "f16": np.float16(0.25), "u8": np.uint8(200),
                  "i64": np.int64(-3), "b": np.bool_(True), "f64": np.float64(2.0)},
        "numpy_fortran": {"f": np.asfortranarray(np.arange(6.0).reshape(2, 3))},
    }


def roundtrip(name, value):
    ref = os.path.join(TMP, name + ".torch.pt")
    torch.save(value, ref)
    pt = os.path.join(TMP, name + ".pt")
    ckpt.save(value, pt)
    for wo in (True, False):
        want, got = torch_load(ref, wo), torch_load(pt, wo)
        assert got == want, "torch.load(weights_only=%s):\n ckpt:  %r\n torch: %r" % (wo, got, want)
    want = torch_load(ref, False)[1]
    got = describe(ckpt.load(pt))
    assert got == want, "ckpt.load(.pt):\n ckpt:  %r\n torch: %r" % (got, want)
    got = describe(ckpt.load(ref))
    assert got == want, "ckpt.load(torch.save):\n ckpt:  %r\n torch: %r" % (got, want)
    if isinstance(value, dict):  # safetensors files hold a mapping at the root
        st = os.path.join(TMP, name + ".safetensors")
        ckpt.save(value, st)
        got, want = describe(ckpt.load(st), False), describe(torch.load(ref, weights_only=False), False)
        assert got == want, "ckpt.load(.safetensors):\n ckpt:  %r\n torch: %r" % (got, want)


def refused(value, words):
    for ext in (".pt", ".safetensors"):
        try:
            ckpt.save({"x": value}, os.path.join(TMP, "refused" + ext))
        except ckpt.UnsupportedError as e:
            for w in words:
                assert w in str(e), "%r not in %s" % (w, e)
        else:
            raise AssertionError("ckpt.save wrote %r" % (value,))


def main():
    for name, value in table().items():
        check("roundtrip " + name, lambda n=name, v=value: roundtrip(n, v))

    def metadata_kept():  # what load_state_dict reads: BatchNorm's version 2
        net = torch.nn.Sequential(torch.nn.BatchNorm1d(2))
        path = os.path.join(TMP, "bn.pt")
        ckpt.save(net, path)
        sd = torch.load(path, weights_only=True)
        assert type(sd) is collections.OrderedDict and sd._metadata["0"]["version"] == 2, sd
    check("a module saves as an OrderedDict with _metadata", metadata_kept)

    Point = collections.namedtuple("Point", "x y")

    class Sub(torch.Tensor):
        pass

    class Ordered(collections.OrderedDict):
        pass
    p = torch.nn.Parameter(torch.ones(1))
    p.note = "x"
    t = torch.ones(1)
    t.note = "x"
    tensor_attr = collections.OrderedDict(a=1)
    tensor_attr.t = torch.ones(1)

    class Color(enum.IntEnum):
        RED = 1

    class Name(str):
        pass
    x = torch.arange(4.0)
    for label, value, words in (
            ("defaultdict", collections.defaultdict(int, a=1), ["x: a collections.defaultdict",
                                                                "dict(obj)"]),
            ("namedtuple", Point(1, 2), ["x: a __main__.Point", "tuple(obj)"]),
            ("OrderedDict subclass", Ordered(a=1), ["Ordered", "dict(obj)"]),
            ("list subclass", type("L", (list,), {})([1]), ["L", "list(obj)"]),
            ("tensor subclass", torch.ones(1).as_subclass(Sub), ["subclass", "Sub"]),
            ("Parameter with attributes", p, ["Parameter with attributes (note)"]),
            ("tensor with attributes", t, ["tensor with attributes (note)"]),
            ("tensor in an OrderedDict's attributes", tensor_attr,
             ["tensor held in the attributes", '"x.t"']),
            # an int or str subclass torch.save pickles as its class (ckpt
            # saved the plain value)
            ("IntEnum", Color.RED, ["x: a __main__.main.<locals>.Color", "int(obj)"]),
            ("str subclass", Name("n"), ["x: a __main__.main.<locals>.Name", "str(obj)"]),
            ("float subclass", type("F", (float,), {})(1.0), ["float(obj)"]),
            ("memoryview", memoryview(b"ab"), ["torch.save cannot pickle it", "bytes(obj)"]),
            # ckpt.load gives these back; the writer cannot write them (it
            # said torch.load(weights_only=True) does not build a complex)
            ("complex", 1 + 2j, ["x: a complex number", "has no such value",
                                 "torch.tensor(obj)"]),
            ("layout", torch.sparse_coo, ["x: torch.sparse_coo", "has no such value"]),
            ("numpy str scalar", np.str_("a"), ["numpy.str_ scalar", "x.item()"]),
            ("numpy big-endian array", np.arange(2, dtype=">i4"), ["dtype >i4"]),
            ("numpy string array", np.array(["a"]), ["dtype <U1"]),
            ("numpy subclass", np.ma.array([1]), ["MaskedArray", "numpy.asarray"]),
            ("one storage as two dtypes", [x, x.view(torch.int32)],
             ["x.1: a tensor of torch.int32 over the memory of a tensor of torch.float32"])):
        check("refused: " + label, lambda v=value, w=words: refused(v, w))
    return TALLY.end()


if __name__ == "__main__":
    sys.exit(main())
