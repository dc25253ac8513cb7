#!/usr/bin/python3
"""Writes the two example checkpoints next to this script:

  train.pt           a real training checkpoint written by torch.save: a
                     tiny MLP (Linear 16->32, ReLU, Linear 32->4) trained 5
                     steps with Adam on random data (fixed seed), with the
                     model, optimizer and StepLR scheduler state_dicts,
                     epoch and step;
  train.safetensors  the same model weights as safetensors, written by the
                     plain writer below, which follows the reference writer
                     (shared/docs/FORMATS.md §1.5): tensors sorted by dtype
                     descending (enum order of §1.3), then by name; offsets
                     contiguous from 0; compact header JSON with
                     __metadata__ {"format": "pt"} first, padded with spaces
                     to a multiple of 8.

Run with Debian's python3 (python3-torch 1.13) from a directory without a
folder named "torch":  cd /tmp && /usr/bin/python3 .../examples/make_example.py
"""
import json
import os
import struct
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))

# safetensors Dtype enum order (FORMATS.md §1.3) and torch equivalents.
ST_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2",
            "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16",
            "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"]
ST_DTYPE = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8",
            torch.int16: "I16", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.int32: "I32", torch.float32: "F32", torch.complex64: "C64",
            torch.float64: "F64", torch.int64: "I64"}


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def save_safetensors(tensors, path, metadata):
    """A plain safetensors writer (FORMATS.md §1.5)."""
    order = sorted(tensors.items(),
                   key=lambda kv: (-ST_ORDER.index(ST_DTYPE[kv[1].dtype]), kv[0]))
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in order:
        data = tensor_bytes(t)
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def main():
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
    pt = os.path.join(HERE, "train.pt")
    st = os.path.join(HERE, "train.safetensors")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "epoch": 3, "step": 5}, pt)
    save_safetensors(model.state_dict(), st, {"format": "pt"})
    for p in (pt, st):
        print("%s: %d bytes" % (os.path.relpath(p, HERE), os.path.getsize(p)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
