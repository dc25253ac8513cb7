"""Writes the files of test_load_verdicts.py with the torch running it,
beside what the real loaders say of each (torch's load_state_dict, strict
and not, after the rewrite a user would write; safetensors' load_model
where it is installed), in OUTDIR/verdicts.json:

  renamed.pt, tiny_renamed.pt  a model's keys with layers. renamed
      blocks. (4 of 8 keys; 12 of 16): the rename loads, the others keep
      their names
  causal.pt     a causal LM's flat state dict (model.* and lm_head.weight)
      against the inner model: model. stripped, lm_head.weight unexpected
  train_rng.pt  {"model": sd, "optimizer", "rng": get_rng_state(), "step"}
  untied.pt     an untied checkpoint into a model tying embed and head
      (its manifest, or tied.pt, the tie as one storage): loads, and
      head.weight's values win
  ck_tied.safetensors  ckpt.save of the tied model: safetensors' readers
      miss head.weight in an untied model
  bf16.pt       every tensor bfloat16 against a float32 model: torch casts
  ddp.pt        a DataParallel checkpoint into a model with a new head
  tiny_train.pt a training checkpoint of a tied model (doctor's counts)

usage: gen_load_verdicts.py OUTDIR  (PYTHONPATH: the ckpt package)"""
import json
import os
import sys
from collections import OrderedDict

import torch
import torch.nn as nn

import ckpt


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)


class Net(nn.Module):  # embed and head tied
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.layers = nn.ModuleList([Block(), Block()])
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.embed.weight


class Untied(Net):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 10, bias=False)


class WithCls(Net):
    def __init__(self):
        super().__init__()
        self.cls = nn.Linear(8, 3)


class TinyBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)


class TinyLM(nn.Module):  # 12 of its 16 keys under layers.
    def __init__(self, V=50, d=16, L=2):
        super().__init__()
        self.embed = nn.Embedding(V, d)
        self.layers = nn.ModuleList([TinyBlock(d) for _ in range(L)])
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, V, bias=False)
        self.lm_head.weight = self.embed.weight


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(10, 8)
        self.norm = nn.LayerNorm(8)


class Causal(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Base()
        self.lm_head = nn.Linear(8, 10, bias=False)


def strict(model, sd, **kw):
    """torch's verdict: (missing, unexpected) of load_state_dict, strict
    or not; a strict failure is caught and its key lists read back."""
    try:
        r = model.load_state_dict(sd, strict=kw.get("strict", True))
        return sorted(r.missing_keys), sorted(r.unexpected_keys)
    except RuntimeError as e:
        r = model.load_state_dict(sd, strict=False)
        assert str(e)
        return sorted(r.missing_keys), sorted(r.unexpected_keys)


def main(out):
    p = lambda *a: os.path.join(out, *a)  # noqa: E731
    v = {"torch": torch.__version__}
    torch.manual_seed(0)

    def manifest(model, name):
        with open(p(name), "w") as f:
            json.dump(ckpt.manifest(model), f)

    sd = Net().state_dict()
    manifest(Net(), "net.json")
    manifest(Untied(), "untied.json")
    manifest(WithCls(), "withcls.json")
    manifest(TinyLM(), "tiny.json")
    manifest(Base(), "base.json")

    # F1: renamed layers; the rename a user writes is a replace over every key
    ren = OrderedDict((k.replace("layers.", "blocks."), t) for k, t in sd.items())
    torch.save(ren, p("renamed.pt"))
    back = {k.replace("blocks.", "layers."): t for k, t in ren.items()}
    v["renamed"] = strict(Net(), back)
    tsd = TinyLM().state_dict()
    tren = OrderedDict((k.replace("layers.", "blocks."), t) for k, t in tsd.items())
    torch.save(tren, p("tiny_renamed.pt"))
    v["tiny_renamed"] = strict(TinyLM(), {k.replace("blocks.", "layers."): t
                                          for k, t in tren.items()})
    v["tiny_under_layers"] = sum(k.startswith("layers.") for k in tsd)

    # F2: a flat state dict of a causal LM against its inner model
    csd = Causal().state_dict()
    torch.save(csd, p("causal.pt"))
    v["causal"] = strict(Base(), {k[len("model."):] if k.startswith("model.") else k: t
                                  for k, t in csd.items()})
    m = Net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(),
                "rng": torch.get_rng_state(), "step": 3}, p("train_rng.pt"))
    v["train_rng"] = strict(Net(), torch.load(p("train_rng.pt"))["model"])

    # F7: an untied checkpoint into a tied model
    u = Untied()
    torch.save(u.state_dict(), p("untied.pt"))
    torch.save(Net().state_dict(), p("tied.pt"))  # the tie as one storage
    t = Net()
    v["untied"] = strict(t, u.state_dict())
    v["untied_head_wins"] = bool(torch.equal(t.embed.weight, u.head.weight) and
                                 not torch.equal(u.embed.weight, u.head.weight))

    # F10: ckpt's own safetensors of the tied model, through safetensors
    ckpt.save(Net(), p("ck_tied.safetensors"))
    try:
        from safetensors.torch import load_file, load_model
    except ImportError:
        v["safetensors"] = None
    else:
        got = {}
        for name, model in (("untied", Untied()), ("tied", Net())):
            try:
                missing, unexpected = load_model(model, p("ck_tied.safetensors"))
                got[name] = [sorted(missing), sorted(unexpected)]
            except RuntimeError as e:
                got[name] = ["error", str(e).count("head.weight")]
        got["load_file_keys"] = sorted(load_file(p("ck_tied.safetensors")))
        v["safetensors"] = got

    # dtypes alone differ: torch casts as it copies
    torch.save(Net().to(torch.bfloat16).state_dict(), p("bf16.pt"))
    v["bf16"] = strict(Net(), torch.load(p("bf16.pt")))

    # F9: DataParallel keys into a model with a new head, module. stripped
    torch.save(OrderedDict(("module." + k, t) for k, t in sd.items()), p("ddp.pt"))
    v["ddp"] = strict(WithCls(), {k[len("module."):]: t for k, t in
                                  torch.load(p("ddp.pt")).items()}, strict=False)

    # doctor: the distinct tensors of a tied model
    tm = TinyLM()
    tsd = tm.state_dict()
    torch.save({"model": tsd, "optimizer": torch.optim.AdamW(tm.parameters()).state_dict(),
                "epoch": 1}, p("tiny_train.pt"))
    seen = {}
    for t in tsd.values():
        seen[(t.data_ptr(), t.dtype, tuple(t.shape))] = t.numel() * t.element_size()
    v["tiny_train"] = {"names": len(tsd), "tensors": len(seen), "bytes": sum(seen.values())}

    with open(p("verdicts.json"), "w") as f:
        json.dump(v, f)


if __name__ == "__main__":
    main(sys.argv[1])
