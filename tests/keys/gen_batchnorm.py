"""Writes the BatchNorm num_batches_tracked cases of test_batchnorm.py
with the torch running it, and torch's own verdict on each: a model of
Linear, BatchNorm1d, Linear whose state dict lacks bn.num_batches_tracked,
its _metadata giving the BatchNorm version None (no _metadata), 1 or 2;
keys plain or "module."-prefixed (DataParallel); saved flat, as
{"model": sd}, or as a training checkpoint {"model": sd, "optimizer":
Adam's state, "epoch": 3} (more optimizer tensors than model keys: the
rewrite selects the "model" subtree). torch's verdict is what load_state_dict reports for the
state dict as a user passes it (taken out of {"model": ...}, the prefix
stripped, _metadata kept): its missing_keys, which strict=True refuses.
Also the model's manifest (ckpt.manifest) and a full state dict.

usage: gen_batchnorm.py OUTDIR  (PYTHONPATH: the ckpt package)"""
import json
import os
import sys
from collections import OrderedDict

import torch

import ckpt


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(OrderedDict(
        fc1=torch.nn.Linear(4, 3), bn=torch.nn.BatchNorm1d(3), fc2=torch.nn.Linear(3, 2)))


def saved(full, version, prefix):
    sd = OrderedDict((prefix + k, v) for k, v in full.items() if k != "bn.num_batches_tracked")
    if version is not None:
        sd._metadata = OrderedDict(((prefix + k).rstrip("."), dict(v))
                                   for k, v in full._metadata.items())
        sd._metadata[prefix + "bn"]["version"] = version
    return sd


def optimizer_state():
    m = model()
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    m(torch.randn(4, 4)).sum().backward()
    opt.step()
    return opt.state_dict()


def main(out):
    full = model().state_dict()
    layouts = {"flat": lambda sd: sd, "nested": lambda sd: {"model": sd},
               "train": lambda sd: {"model": sd, "optimizer": optimizer_state(), "epoch": 3}}
    cases = []
    for version in (None, 1, 2):
        for prefix in ("", "module."):
            for layout, wrap in layouts.items():
                sd = saved(full, version, prefix)
                name = "v%s_%s_%s.pt" % (version, prefix.rstrip(".") or "plain", layout)
                torch.save(wrap(sd), os.path.join(out, name))
                user = OrderedDict((k[len(prefix):], v) for k, v in sd.items())
                if version is not None:
                    user._metadata = saved(full, version, "")._metadata
                r = model().load_state_dict(user, strict=False)
                cases.append({"file": name, "missing": list(r.missing_keys),
                              "unexpected": list(r.unexpected_keys)})
    torch.save(full, os.path.join(out, "full.pt"))
    cases.append({"file": "full.pt", "missing": [], "unexpected": []})
    with open(os.path.join(out, "model.json"), "w") as f:
        json.dump(ckpt.manifest(model()), f)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)


if __name__ == "__main__":
    main(sys.argv[1])
