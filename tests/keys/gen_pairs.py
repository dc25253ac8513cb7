#!/usr/bin/python3
"""Writes checkpoint pairs with PyTorch for the key-audit tests
(test_keys.py): one small model saved plain and through the wrappers that
rename its keys, models that differ from it, tied weights, training
checkpoints ({"model", "optimizer", "epoch"}) that differ in epoch and
learning rate only, and tensors for `ckpt diff`.

    /usr/bin/python3 tests/keys/gen_pairs.py OUTDIR

Run with Debian's python3 (python3-torch 1.13), from a working directory
without a folder named "torch" in it. Deterministic (seeded); writes about
100 KB in a few seconds.

torch 1.13 has no torch.compile: its OptimizedModule keeps the original
module in an attribute named `_orig_mod`, which Compiled() below
reproduces, so the keys are exactly those a compiled model saves.
"""
import collections
import json
import os
import struct
import sys

import torch
import torch.nn as nn


class Net(nn.Module):
    """11 keys: 3 linear layers, a batch norm (F32 buffers and an I64
    counter)."""

    def __init__(self, out=2):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, 8)
        self.fc3 = nn.Linear(8, out)

    def forward(self, x):
        return self.fc3(self.fc2(self.bn(self.fc1(x))))


class Changed(nn.Module):
    """Net with fc2 renamed to fc_two, fc3 resized, fc1 retyped (F16)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8).half()
        self.bn = nn.BatchNorm1d(8)
        self.fc_two = nn.Linear(8, 8)
        self.fc3 = nn.Linear(8, 3)


class Compiled(nn.Module):
    """What torch.compile returns: the model under `_orig_mod`."""

    def __init__(self, model):
        super().__init__()
        self._orig_mod = model


class TiedLM(nn.Module):
    """An embedding and an output layer sharing one weight."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.norm = nn.LayerNorm(4)
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.embed.weight


def save(obj, out, name):
    torch.save(obj, os.path.join(out, name))


def safetensors(path, tensors, metadata):
    """A safetensors file written by hand (the safetensors package is not
    installed): header with __metadata__, data in order."""
    header = collections.OrderedDict()
    header["__metadata__"] = metadata
    blobs, off = [], 0
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main(out):
    torch.manual_seed(0)
    net = Net()
    sd = net.state_dict()
    save(sd, out, "model.pt")
    save(nn.DataParallel(net).state_dict(), out, "dp.pt")
    save(Compiled(net).state_dict(), out, "orig.pt")
    save(nn.DataParallel(Compiled(net)).state_dict(), out, "dp_orig.pt")
    save(Compiled(nn.DataParallel(net)).state_dict(), out, "orig_dp.pt")

    # DataParallel keys, one of them without the prefix
    partial = collections.OrderedDict(
        ("fc1.bias" if k == "module.fc1.bias" else k, v)
        for k, v in nn.DataParallel(net).state_dict().items())
    save(partial, out, "partial.pt")

    torch.manual_seed(1)
    save(Changed().state_dict(), out, "changed.pt")

    bad = collections.OrderedDict(
        ("fc1.weight.bad_key" if k == "fc1.weight" else k, v) for k, v in sd.items())
    save(bad, out, "bad_key.pt")

    save({"state_dict": sd, "epoch": 3}, out, "nested_state_dict.pt")
    save({"model": sd, "step": 10}, out, "nested_model.pt")

    # training checkpoints after one Adam step: the same tensors, epoch 2
    # and lr 0.001 against epoch 7 and lr 0.5
    train = Net()
    train.load_state_dict(sd)
    opt = torch.optim.Adam(train.parameters(), lr=0.001)
    train(torch.randn(3, 4)).sum().backward()
    opt.step()
    save({"model": train.state_dict(), "optimizer": opt.state_dict(), "epoch": 2},
         out, "train.pt")
    for group in opt.param_groups:
        group["lr"] = 0.5
    save({"model": train.state_dict(), "optimizer": opt.state_dict(), "epoch": 7},
         out, "train_e7.pt")
    save(train.state_dict(), out, "train_model.pt")

    torch.manual_seed(2)
    lm = TiedLM()
    save(lm.state_dict(), out, "tied.pt")
    dropped = collections.OrderedDict(
        (k, v) for k, v in lm.state_dict().items() if k != "lm_head.weight")
    save(dropped, out, "tied_dropped.pt")
    # the same in bfloat16: its keys differ from the model's in dtype alone
    save(collections.OrderedDict((k, v.to(torch.bfloat16)) for k, v in dropped.items()),
         out, "tied_dropped_bf16.pt")
    # safetensors' save_model: the alias is dropped and recorded as
    # metadata[dropped name] = kept name
    safetensors(os.path.join(out, "tied_hf.safetensors"), dropped,
                {"format": "pt", "lm_head.weight": "embed.weight"})
    # the same names with a head of its own (another model): the alias of
    # tied_hf.safetensors does not make its lm_head.weight a tied copy
    untied = collections.OrderedDict(lm.state_dict())
    untied["lm_head.weight"] = untied["lm_head.weight"].clone() + 1
    save(untied, out, "tied_other_head.pt")

    # tensors in a list: rename may not move them out of it
    save({"layers": [torch.ones(2), torch.zeros(2)], "head": torch.ones(3)}, out, "list.pt")

    # ckpt diff: exact values
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    b = a.clone()
    b[0, 1] = 1.5
    b[2, 3] = -11.0
    b[1, 0] = 4.0000005
    nan_a = torch.tensor([1.0, float("nan"), float("inf"), 0.0, 2.0])
    nan_b = torch.tensor([1.0, float("nan"), 3.0, -0.0, float("nan")])
    ints = torch.tensor([1, 2, 3], dtype=torch.int64)
    save(collections.OrderedDict([("w", a), ("same", a.clone()), ("nan", nan_a),
                                  ("ints", ints), ("only_a", ints.clone()),
                                  ("scalar", torch.tensor(1.0))]),
         out, "diff_a.pt")
    save(collections.OrderedDict([("w", b), ("same", a.clone()), ("nan", nan_b),
                                  ("ints", torch.tensor([1, 2, 4])),
                                  ("only_b", ints.clone()), ("scalar", torch.tensor(2.0))]),
         out, "diff_b.pt")
    save(collections.OrderedDict((k, v.to(torch.bfloat16) if v.is_floating_point() else v)
                                 for k, v in sd.items()),
         out, "model_bf16.pt")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gen_pairs.py OUTDIR")
    main(sys.argv[1])
