#!/usr/bin/python3
"""Writes Hugging Face style model folders with the running torch:

    PYTHON tests/interop/gen_hf.py OUTDIR

  bin_set/   pytorch_model.bin.index.json + two torch.save shards, as
             transformers' save_pretrained(safe_serialization=False,
             max_shard_size=...) lays them out, and a config.json
  single/    pytorch_model.bin alone
  trainer/   a Trainer checkpoint folder: pytorch_model.bin, optimizer.pt,
             scheduler.pt, trainer_state.json
and next to each folder DIR its DIR.expected.json: torch's view of the
model weights (the shards merged, as from_pretrained loads them), in the
shape of `ckpt inspect --json --hash sha256`.
"""
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_checkpoints as g  # noqa: E402

INDEX = "pytorch_model.bin.index.json"


def model():
    torch.manual_seed(11)
    return nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Linear(5, 3))


def load(path):
    kw = {"weights_only": True} if "weights_only" in torch.load.__code__.co_varnames else {}
    return torch.load(path, **kw)


def bin_set(outdir):
    d = os.path.join(outdir, "bin_set")
    os.makedirs(d)
    sd = model().state_dict()
    names = list(sd)
    shards = [names[:3], names[3:]]
    weight_map, merged = {}, {}
    for i, keys in enumerate(shards):
        fname = "pytorch_model-%05d-of-%05d.bin" % (i + 1, len(shards))
        torch.save({k: sd[k] for k in keys}, os.path.join(d, fname))
        weight_map.update({k: fname for k in keys})
        merged.update(load(os.path.join(d, fname)))
    total = sum(t.numel() * t.element_size() for t in sd.values())
    with open(os.path.join(d, INDEX), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "toy", "hidden_size": 5}, f)
    return d, merged, {"total_size": str(total)}  # index metadata: JSON text


def single(outdir):
    d = os.path.join(outdir, "single")
    os.makedirs(d)
    torch.save(model().state_dict(), os.path.join(d, "pytorch_model.bin"))
    return d, load(os.path.join(d, "pytorch_model.bin")), None


def trainer(outdir):
    d = os.path.join(outdir, "trainer")
    os.makedirs(d)
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m(torch.randn(2, 6)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    torch.save(m.state_dict(), os.path.join(d, "pytorch_model.bin"))
    torch.save(opt.state_dict(), os.path.join(d, "optimizer.pt"))
    torch.save({k: v for k, v in sched.state_dict().items() if k != "lr_lambdas"},
               os.path.join(d, "scheduler.pt"))
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump({"global_step": 1, "epoch": 1.0, "log_history": []}, f)
    return d, load(os.path.join(d, "pytorch_model.bin")), None


def main():
    if len(sys.argv) != 2:
        print("usage: gen_hf.py OUTDIR", file=sys.stderr)
        return 2
    os.makedirs(sys.argv[1], exist_ok=True)
    for make in (bin_set, single, trainer):
        d, sd, metadata = make(sys.argv[1])
        g.write_expected(d, "torch-sharded" if make is bin_set else "torch-zip", sd)
        with open(d + ".expected.json", encoding="utf-8") as f:
            doc = json.load(f)
        doc["metadata"] = metadata
        with open(d + ".expected.json", "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    print("torch %s wrote 3 folders" % torch.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
