"""ckpt.load of safetensors files written by ckpt: the tree comes back from
"ckpt.structure" through libckpt's decoder (ckpt_file_logical_root), the
one decoder of it. The Python copy it replaced refused version 2 of the
structure (dicts with a class, i.e. every OrderedDict state dict), so
ckpt.load failed on half of the converted interop set."""
import collections
import os
import subprocess

import pytest
import torch

import ckpt


def norm(o):
    """Structure, dtypes, shapes, requires_grad and bytes of a loaded tree."""
    if isinstance(o, torch.Tensor):
        raw = o.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        return ("T", str(o.dtype), tuple(o.shape), o.requires_grad, raw)
    if isinstance(o, dict):
        return ("dict", [(repr(k), norm(v)) for k, v in o.items()])
    if isinstance(o, (list, tuple)):
        return (type(o).__name__, [norm(v) for v in o])
    if isinstance(o, set):
        return ("set", sorted(repr(v) for v in o))
    return repr(o)


def sample():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    sd = collections.OrderedDict([("w", base), ("col", base[:, 1]), ("b", torch.ones(2))])
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    return {"model": sd, "c": torch.complex(base, -base), "step": 7, "tags": ("a", 2.5),
            "shared": [sd["b"], sd["b"]], "big": 2 ** 80}


def test_ordered_dict_state_dict_round_trips(tmp_path):
    pt, st = str(tmp_path / "x.pt"), str(tmp_path / "x.safetensors")
    torch.save(sample(), pt)
    # the executable links the sanitizer runtime itself when it has one
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run([os.environ.get("CKPT_BIN", "ckpt"), "convert", pt, st], check=True,
                   stdout=subprocess.DEVNULL, env=env)
    assert "ckpt.structure" in ckpt.metadata(st)
    got = ckpt.load(st)
    assert norm(got) == norm(ckpt.load(pt))
    assert list(got["model"]) == ["w", "col", "b"]
    assert got["shared"][0] is got["shared"][1]  # one node, written once


def test_cyclic_structure_is_a_format_error(tmp_path):
    """A ref to its own container: refused, not recursed into."""
    import json
    import struct
    meta = {"ckpt.structure": json.dumps({"version": 1, "root": {"list": [{"ref": 0}]}})}
    header = json.dumps({"__metadata__": meta}).encode()
    path = tmp_path / "cycle.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(ckpt.FormatError, match="names a container from inside it"):
        ckpt.load(str(path))


@pytest.mark.parametrize("version,node,message", [
    (1, {"device": "cuda:1"}, 'unknown tag "device"'),  # version 2 tags
    (1, {"size": [2]}, 'unknown tag "size"'),
    (1, {"bytearray": "00"}, 'unknown tag "bytearray"'),
    (2, {"size": [2, "a"]}, r'"size" \(a torch.Size\) holds ints of 64 bits only'),
    (2, {"size": [{"int": "18446744073709551616"}]}, "holds ints of 64 bits only"),
    (2, {"device": 1}, '"device" must be a string'),
    # what torch.device refuses, and what Python cannot hash
    (2, {"device": "foo"}, "unknown device type 'foo'"),
    (2, {"device": "cuda:01"}, "expected a device string"),
    (2, {"set": [{"list": []}]}, "expected a hashable set item, got a list"),
    (2, {"frozenset": [{"bytearray": "00"}]}, "expected a hashable set item, got a bytearray"),
    (2, {"dict": [[{"tuple": [{"set": []}]}, 1]]}, "expected a hashable dict key, got a set"),
])
def test_torch_types_tags_are_checked(tmp_path, version, node, message):
    """torch.Size, torch.device and bytearray nodes of the structure (as
    ckpt convert writes them): from version 2 and well-formed, else
    refused."""
    import json
    import struct
    meta = {"ckpt.structure": json.dumps({"version": version, "root": {"list": [node]}})}
    header = json.dumps({"__metadata__": meta}).encode()
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(ckpt.FormatError, match=message):
        ckpt.load(str(path))
    meta["ckpt.structure"] = json.dumps({"version": 2, "root": {"list": [
        {"device": "cuda:1"}, {"size": [2, 3]}, {"bytearray": "00ff"}]}})
    header = json.dumps({"__metadata__": meta}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    assert ckpt.load(str(path)) == [torch.device("cuda:1"), torch.Size([2, 3]),
                                    bytearray(b"\x00\xff")]
    assert [type(x) for x in ckpt.load(str(path))] == [torch.device, torch.Size, bytearray]
