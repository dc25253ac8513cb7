"""Writes the key-integrity cases of test_key_integrity.py with the torch
running it, and says what torch.load and ckpt.load give for each: keys
that flatten to one name ({"a.b": x, "a": {"b": y}}, {"0": x, 0: y},
{"w": x, b"w": y}), keys holding a NUL byte (torch zip, raw pickle,
safetensors and a DCP directory where this torch and safetensors write
them) and str keys holding a lone surrogate.

usage: gen_key_integrity.py OUTDIR  (PYTHONPATH: the ckpt package)
Prints one JSON object: {"torch": version, "cases": [{"file", "kind",
"same": ckpt.load == torch.load, "error": ckpt.load's error or null}]}."""
import json
import os
import pickle
import sys
import warnings

import torch

import ckpt


def same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and
                a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return (list(map(repr, a)) == list(map(repr, b)) and
                all(same(a[k], b[k]) for k in a))
    return type(a) is type(b) and a == b


def main():
    out = sys.argv[1]
    z, o = torch.zeros(2), torch.ones(3)
    cases = []

    def add(name, kind, obj, save=torch.save, load=torch.load):
        path = os.path.join(out, name)
        save(obj, path)
        case = {"file": path, "kind": kind, "same": None, "error": None}
        try:
            got = ckpt.load(path)
        except Exception as e:  # what ckpt says it cannot load
            case["error"] = str(e)
        else:
            case["same"] = same(got, load(path))
        cases.append(case)

    add("dot.pt", "collide", {"a.b": z, "a": {"b": o}})
    add("int.pt", "collide", {"0": z, 0: o})
    add("bytes.pt", "collide", {"w": z, b"w": o})
    add("nul.pt", "nul", {"a\x00b": z, "a\x00c": o})
    add("surrogate.pt", "surrogate", {"\udc80": z, "\udc81": o})

    def dump(obj, path):
        with open(path, "wb") as f:
            pickle.dump(obj, f, protocol=2)

    def unpickle(path):
        with open(path, "rb") as f:
            return pickle.load(f)

    add("nul.pkl", "nul", {"a\x00b": 1, "a\x00c": 2}, dump, unpickle)
    add("surrogate0.pkl", "surrogate", {"\udc80": 1}, lambda v, p: open(p, "wb").write(
        pickle.dumps(v, protocol=0)), unpickle)
    try:
        import safetensors.torch as st
    except ImportError:
        pass
    else:
        add("nul.safetensors", "nul", {"a\x00b": z, "a\x00c": o}, st.save_file, st.load_file)
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:
        dcp = None
    if dcp is not None and hasattr(dcp, "save"):
        path = os.path.join(out, "nul_dcp")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"a\x00b": z, "a\x00c": o}, checkpoint_id=path, no_dist=True)
        case = {"file": path, "kind": "nul", "same": None, "error": None}
        try:
            ckpt.load(path)
        except Exception as e:
            case["error"] = str(e)
        cases.append(case)
    print(json.dumps({"torch": torch.__version__, "cases": cases}))


if __name__ == "__main__":
    main()
