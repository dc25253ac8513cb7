#!/usr/bin/python3
"""Loads files ckpt wrote with the running torch, the way a user would, and
prints their view (gen_checkpoints.py's shape) as one JSON object per file:

    PYTHON load_written.py FILE...

FILE.pt: torch.load(FILE, weights_only=True), with mmap=True where torch
has it (>= 2.1). FILE.safetensors: safetensors.torch.load_file (tensors
only: ckpt keeps the values in its metadata). A file this torch refuses
prints {"file": FILE, "error": "..."}.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_torch2  # noqa: E402  (its dtype names and byte views)
from gen_checkpoints import view  # noqa: E402


def load(path, doc):
    if path.endswith(".safetensors"):
        from safetensors import safe_open
        from safetensors.torch import load_file
        tensors = load_file(path)
        with safe_open(path, "pt") as f:
            aliases = json.loads((f.metadata() or {}).get("ckpt.aliases", "{}"))
        # tied weights are stored once; ckpt.aliases names the others
        tensors.update({a: tensors[t] for a, t in aliases.items()})
        return tensors
    kw = {"weights_only": True}
    if "mmap" in torch.load.__code__.co_varnames:
        kw["mmap"] = True
    try:
        return torch.load(path, **kw)
    except Exception as e:  # noqa: BLE001
        if not torch.__version__.startswith("1.") or "Unsupported operand 71" not in str(e):
            raise
    # torch 1.13's weights_only unpickler has no BINFLOAT (71, 'G'): it
    # refuses any float, also in files torch 1.13 writes itself
    doc["note"] = "torch %s weights_only refuses floats (BINFLOAT); loaded " \
        "with weights_only=False" % torch.__version__
    return torch.load(path)


def main():
    for path in sys.argv[1:]:
        try:
            doc = {"file": path}
            tensors, values = view(gen_torch2.parts(load(path, doc)))
            doc.update(tensors=tensors, values=values)
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            doc = {"file": path, "error": "%s: %s" % (type(e).__name__,
                                                     str(e).splitlines()[0][:300])}
        print(json.dumps(doc, ensure_ascii=False, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
