#!/usr/bin/python3
"""Writes training checkpoints from real PyTorch training loops.

usage: /usr/bin/python3 gen_training.py OUT_DIR

Every file comes from a few optimizer steps on random data (fixed seeds), so
the optimizer, scheduler and RNG states are the ones torch.save really
writes. Cases (what `ckpt doctor` must say is in tests/training/
test_training.py):

  adam_full.pt        MLP + Adam + StepLR + a grad scaler state + torch CPU,
                      numpy and python RNG states; epoch (int) and
                      global_step (0-dim I64 tensor)
  adamw_amsgrad.pt    MLP with BatchNorm + AdamW(amsgrad=True) + StepLR
  sgd_momentum.pt     MLP with BatchNorm + SGD(momentum=0.9)
  sgd_plain.pt        MLP + SGD without momentum (per-parameter state holds
                      no tensors)
  adagrad.pt          MLP + Adagrad
  rmsprop.pt          MLP + RMSprop
  no_optimizer.pt     model + scheduler + scaler + RNG, no optimizer
  missing_state.pt    Adam with parameter 2's state removed
  mismatch.pt         Adam whose parameter 1 state has shape [9], not [8]
  weights_only.pt     model.state_dict() alone
  weights_epoch.pt    {"model": state_dict, "epoch": 3}
  half_adam.pt        an F16 model (as AMP fp16 training keeps a copy) +
                      Adam + StepLR, without a grad scaler state
  lightning.ckpt      a PyTorch Lightning checkpoint's layout (keys as
                      Lightning 1.9 writes them), Adam + StepLR
  hf_trainer/         a Hugging Face Trainer checkpoint directory:
                      model.safetensors, optimizer.pt (AdamW, two parameter
                      groups: decay / no decay, as Trainer builds them),
                      scheduler.pt (LambdaLR), rng_state.pth, scaler.pt,
                      trainer_state.json, config.json, training_args.bin,
                      vocab.txt
  hf_no_optimizer/    the same without optimizer.pt
  fqn_adam.pt         MLP with BatchNorm + Adam + StepLR, the optimizer state
                      keyed by parameter name as torch.distributed.checkpoint.
                      state_dict.get_state_dict (torch >= 2.2) returns it: "state"
                      and each group's "params" hold "fc1.weight"..., not
                      indices (what a DCP save of an FSDP2 or DDP run holds)
  buffer_adam.pt      MLP with a floating-point buffer of the root module
                      ("scale", first in state_dict order) + Adam + StepLR:
                      the model has one floating-point tensor more than the
                      optimizer has parameters
  fqn_unknown.pt      fqn_adam.pt with the state and group entry of "fc2.bias"
                      renamed "fc3.bias", a name the model does not hold

tests/training/data/ holds missing_state.pt, mismatch.pt, no_optimizer.pt,
sgd_plain.pt, fqn_adam.pt, fqn_unknown.pt, buffer_adam.pt and hf_trainer/ as this script writes them (it is
deterministic), for the C unit test tests/test_training.c.

torch.cuda.amp.GradScaler(enabled=False).state_dict() is {} on a CPU-only
machine, so the scaler state is built by hand with the real keys.

Run from a directory without a folder named "torch" (that breaks `import
torch`); Debian's python3 with python3-torch 1.13.
"""
import json
import os
import pickle
import random
import struct
import sys
import types

import numpy as np
import torch
import torch.nn as nn


class MLP(nn.Module):
    """Linear 4->8, (BatchNorm1d 8), ReLU, Linear 8->3."""

    def __init__(self, bn=False):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8) if bn else None
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        h = self.fc1(x)
        if self.bn is not None:
            h = self.bn(h)
        return self.fc2(torch.relu(h))


def train(model, opt, sched=None, steps=3):
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if sched is not None:
            sched.step()


def scaler_state():
    # The keys and types of torch.cuda.amp.GradScaler.state_dict().
    return {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
            "growth_interval": 2000, "_growth_tracker": 3}


def rng_states():
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
            "python": random.getstate()}


def setup(opt_fn, bn=False, seed=0):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    model = MLP(bn)
    opt = opt_fn(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    train(model, opt, sched)
    return model, opt, sched


def adam(params):
    return torch.optim.Adam(params, lr=1e-2)


def write_files(out):
    save = lambda obj, name: torch.save(obj, os.path.join(out, name))

    model, opt, sched = setup(adam)
    save({"model": model.state_dict(), "optimizer": opt.state_dict(),
          "scheduler": sched.state_dict(), "scaler": scaler_state(),
          "rng": rng_states(), "epoch": 3,
          "global_step": torch.tensor(3)}, "adam_full.pt")

    model, opt, sched = setup(
        lambda p: torch.optim.AdamW(p, lr=1e-3, amsgrad=True), bn=True)
    save({"model": model.state_dict(), "optimizer": opt.state_dict(),
          "scheduler": sched.state_dict(), "epoch": 1}, "adamw_amsgrad.pt")

    model, opt, sched = setup(
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), bn=True)
    save({"model_state_dict": model.state_dict(),
          "optimizer_state_dict": opt.state_dict(),
          "scheduler": sched.state_dict(), "epoch": 2}, "sgd_momentum.pt")

    model, opt, sched = setup(lambda p: torch.optim.SGD(p, lr=0.1))
    save({"model": model.state_dict(), "optimizer": opt.state_dict(),
          "scheduler": sched.state_dict(), "rng": rng_states()},
         "sgd_plain.pt")

    model, opt, sched = setup(lambda p: torch.optim.Adagrad(p, lr=0.1))
    save({"model": model.state_dict(), "optimizer": opt.state_dict(),
          "scheduler": sched.state_dict()}, "adagrad.pt")

    model, opt, sched = setup(lambda p: torch.optim.RMSprop(p, lr=0.01))
    save({"model": model.state_dict(), "optimizer": opt.state_dict(),
          "scheduler": sched.state_dict()}, "rmsprop.pt")

    model, opt, sched = setup(adam)
    save({"model": model.state_dict(), "scheduler": sched.state_dict(),
          "scaler": scaler_state(), "rng": rng_states(), "epoch": 3},
         "no_optimizer.pt")

    model, opt, sched = setup(adam)
    sd = opt.state_dict()
    del sd["state"][2]
    save({"model": model.state_dict(), "optimizer": sd,
          "scheduler": sched.state_dict(), "epoch": 3}, "missing_state.pt")

    model, opt, sched = setup(adam)
    sd = opt.state_dict()
    sd["state"][1]["exp_avg"] = torch.zeros(9)
    sd["state"][1]["exp_avg_sq"] = torch.zeros(9)
    save({"model": model.state_dict(), "optimizer": sd,
          "scheduler": sched.state_dict(), "epoch": 3}, "mismatch.pt")

    model, opt, sched = setup(adam)
    save({"model": {k: v.half() for k, v in model.state_dict().items()},
          "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
          "rng": rng_states()}, "half_adam.pt")

    model, _, _ = setup(adam)
    save(model.state_dict(), "weights_only.pt")
    save({"model": model.state_dict(), "epoch": 3}, "weights_epoch.pt")

    model, opt, sched = setup(adam, bn=True)
    sd = by_name(model, opt.state_dict())
    save({"model": model.state_dict(), "optimizer": sd,
          "scheduler": sched.state_dict(), "epoch": 3}, "fqn_adam.pt")
    sd["state"]["fc3.bias"] = sd["state"].pop("fc2.bias")
    sd["param_groups"][0]["params"][-1] = "fc3.bias"
    save({"model": model.state_dict(), "optimizer": sd,
          "scheduler": sched.state_dict(), "epoch": 3}, "fqn_unknown.pt")

    torch.manual_seed(0)
    model = MLP()
    model.register_buffer("scale", torch.ones(3))
    opt = adam(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    train(model, opt, sched)
    save({"model": model.state_dict(), "optimizer": opt.state_dict(),
          "scheduler": sched.state_dict(), "epoch": 3}, "buffer_adam.pt")

    write_lightning(out)
    write_hf(os.path.join(out, "hf_trainer"), with_optimizer=True)
    write_hf(os.path.join(out, "hf_no_optimizer"), with_optimizer=False)


def by_name(model, sd):
    """Optimizer.state_dict() keyed by parameter name, as get_state_dict's
    _get_optim_state_dict writes it: each index becomes the parameter's
    fully qualified name, in "state" and in every group's "params"."""
    names = {i: n for i, (n, _) in enumerate(model.named_parameters())}
    groups = [dict(g, params=[names[i] for i in g["params"]])
              for g in sd["param_groups"]]
    return {"state": {names[i]: v for i, v in sd["state"].items()},
            "param_groups": groups}


def write_lightning(out):
    model, opt, sched = setup(adam)
    state = {"model." + k: v for k, v in model.state_dict().items()}
    ckpt = {
        "epoch": 4,
        "global_step": 12,
        "pytorch-lightning_version": "1.9.0",
        "state_dict": state,
        "loops": {"fit_loop": {"state_dict": {},
                               "epoch_loop.batch_progress": {
                                   "total": {"ready": 12, "completed": 12},
                                   "current": {"ready": 3, "completed": 3}}}},
        "callbacks": {},
        "optimizer_states": [opt.state_dict()],
        "lr_schedulers": [sched.state_dict()],
        "native_amp_scaling_state": scaler_state(),
        "hparams_name": "kwargs",
        "hyper_parameters": {"hidden": 8, "lr": 0.01, "precision": "16-mixed"},
    }
    torch.save(ckpt, os.path.join(out, "lightning.ckpt"))


ST_DTYPE = {torch.float32: "F32", torch.int64: "I64"}


def save_safetensors(tensors, path, metadata):
    """A plain safetensors writer: tensors sorted by name, contiguous."""
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        data = t.numpy().tobytes()
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class TrainingArguments:
    """Stands in for transformers.TrainingArguments in training_args.bin."""

    def __init__(self):
        self.output_dir = "out"
        self.learning_rate = 5e-5
        self.fp16 = False
        self.bf16 = False
        self.local_rank = -1


def write_hf(out, with_optimizer):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    model = MLP()
    # Trainer.create_optimizer: weights decay, biases do not.
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=5e-5)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / 100)
    train(model, opt, sched, steps=4)
    save_safetensors(model.state_dict(), os.path.join(out, "model.safetensors"),
                     {"format": "pt"})
    if with_optimizer:
        torch.save(opt.state_dict(), os.path.join(out, "optimizer.pt"))
    torch.save(sched.state_dict(), os.path.join(out, "scheduler.pt"))
    torch.save(scaler_state(), os.path.join(out, "scaler.pt"))
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(),
                "cpu": torch.random.get_rng_state()},
               os.path.join(out, "rng_state.pth"))
    with open(os.path.join(out, "trainer_state.json"), "w") as fh:
        json.dump({"best_metric": None, "epoch": 0.5, "global_step": 4,
                   "log_history": [{"epoch": 0.5, "loss": 1.1, "step": 4}],
                   "max_steps": 8, "num_train_epochs": 1,
                   "train_batch_size": 16}, fh, indent=2)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump({"architectures": ["MLP"], "model_type": "mlp",
                   "hidden_size": 8, "torch_dtype": "float32",
                   "transformers_version": "4.30.0"}, fh, indent=2)
    # Pickled from a stand-in module so that loading needs "transformers".
    sys.modules.setdefault("transformers", types.ModuleType("transformers"))
    mod = types.ModuleType("transformers.training_args")
    TrainingArguments.__module__ = mod.__name__
    mod.TrainingArguments = TrainingArguments
    sys.modules[mod.__name__] = mod
    torch.save(TrainingArguments(), os.path.join(out, "training_args.bin"))
    with open(os.path.join(out, "vocab.txt"), "w") as fh:
        fh.write("[PAD]\n[UNK]\nhello\n")


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    os.makedirs(sys.argv[1], exist_ok=True)
    write_files(sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
