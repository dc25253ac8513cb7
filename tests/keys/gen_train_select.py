"""Writes the training checkpoints of test_train_select.py with the torch
running it: {"model": sd, "optimizer": opt.state_dict(), "epoch": 3}
where the model keys are most of the tensors (SGD with momentum: one
buffer per parameter, none per BatchNorm buffer; a model of many
BatchNorm buffers) or a minority (Adam: two per parameter), and two that
torch refuses: a model key missing, an extra key in the model entry, the model's manifest (ckpt.manifest), and the
verdict of torch's strict load_state_dict on the "model" entry of each,
beside whether ckpt.load_state_dict(model, file) loads the file.

usage: gen_train_select.py OUTDIR  (PYTHONPATH: the ckpt package)"""
import json
import os
import sys

import torch

import ckpt


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 2))


def buffers():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)]
    return torch.nn.Sequential(*layers)


def trained(make, opt_class, **kw):
    m = make()
    opt = opt_class(m.parameters(), lr=0.1, **kw)
    m(torch.randn(5, 4)).sum().backward()
    opt.step()
    return m, opt


def main(out):
    cases = []

    def save(name, make, sd, opt):
        torch.save({"model": sd, "optimizer": opt.state_dict(), "epoch": 3},
                   os.path.join(out, name))
        r = make().load_state_dict(sd, strict=False)
        try:
            ckpt.load_state_dict(make(), os.path.join(out, name))
            ckpt_loads = True
        except ckpt.KeyMismatchError:
            ckpt_loads = False
        with open(os.path.join(out, name + ".expect.json"), "w") as f:
            json.dump(ckpt.manifest(make()), f)
        cases.append({"file": name, "tensors": len(sd) + sum(
            torch.is_tensor(v) for s in opt.state_dict()["state"].values() for v in s.values()),
            "model_keys": len(sd), "missing": list(r.missing_keys),
            "unexpected": list(r.unexpected_keys), "ckpt_loads": ckpt_loads})

    m, opt = trained(mlp, torch.optim.SGD, momentum=0.9)
    save("sgd_momentum.pt", mlp, m.state_dict(), opt)
    m, opt = trained(mlp, torch.optim.Adam)
    save("adam.pt", mlp, m.state_dict(), opt)
    m, opt = trained(buffers, torch.optim.SGD, momentum=0.9)
    save("buffers.pt", buffers, m.state_dict(), opt)
    m, opt = trained(buffers, torch.optim.SGD, momentum=0.9)
    sd = m.state_dict()
    del sd["3.running_var"]
    save("buffers_missing.pt", buffers, sd, opt)
    m, opt = trained(mlp, torch.optim.SGD, momentum=0.9)
    sd = m.state_dict()
    sd["0.extra"] = torch.zeros(2)
    save("sgd_momentum_extra.pt", mlp, sd, opt)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)


if __name__ == "__main__":
    main(sys.argv[1])
